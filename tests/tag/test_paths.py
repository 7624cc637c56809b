"""`core.tag.paths`: a path the model names is sent only when, resolved, it is a regular file under an allowed
directory. `..`, absolute paths elsewhere and symlinks pointing out are refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.chat.message_elements import File, Image
from core.tag import MediaPathError, check_media_path, find_attachment, resolve_media_path


@pytest.fixture
def media(tmp_path: Path) -> Path:
    """tmp/media/{cat.png, sub/doc.txt, out -> ../secret.txt, in -> cat.png, dir/}, tmp/secret.txt."""
    root = tmp_path / "media"
    (root / "sub").mkdir(parents=True)
    (root / "dir").mkdir()
    (root / "cat.png").write_bytes(b"png")
    (root / "sub" / "doc.txt").write_text("doc")
    (tmp_path / "secret.txt").write_text("secret")
    os.symlink(tmp_path / "secret.txt", root / "out")
    os.symlink(root / "cat.png", root / "in")
    return root


def test_files_inside_the_root_are_allowed(media: Path) -> None:
    assert check_media_path(str(media / "cat.png"), [media]) == (media / "cat.png").resolve()
    assert check_media_path("sub/doc.txt", [media]) == (media / "sub" / "doc.txt").resolve()
    assert check_media_path(" cat.png ", [media]) == (media / "cat.png").resolve()
    assert check_media_path(f"file://{media / 'cat.png'}", [media]) == (media / "cat.png").resolve()
    assert check_media_path("in", [media]) == (media / "cat.png").resolve()  # a symlink staying inside


@pytest.mark.parametrize(
    "value",
    [
        "../secret.txt",
        "sub/../../secret.txt",
        "out",  # a symlink inside the root that points outside
        "{tmp}/secret.txt",  # absolute, outside
        "{media}/../secret.txt",
        "{media}/out",
        "/etc/passwd",
        "file:///etc/passwd",
        "file://evil.example/etc/passwd",
        "https://example.com/cat.png",
        "missing.png",
        "dir",  # not a regular file
        "",
        "cat.png\x00.txt",
    ],
)
def test_everything_else_is_refused(media: Path, value: str) -> None:
    value = value.format(tmp=media.parent, media=media)
    with pytest.raises(MediaPathError):
        check_media_path(value, [media])


def test_no_roots_means_nothing_is_allowed(media: Path) -> None:
    with pytest.raises(MediaPathError):
        check_media_path(str(media / "cat.png"), [])
    with pytest.raises(MediaPathError):
        check_media_path(str(media / "cat.png"), [media / "does-not-exist"])


def test_a_root_given_through_a_symlink(media: Path, tmp_path: Path) -> None:
    os.symlink(media, tmp_path / "link-to-media")
    assert check_media_path("cat.png", [tmp_path / "link-to-media"]) == (media / "cat.png").resolve()
    with pytest.raises(MediaPathError):
        check_media_path("../secret.txt", [tmp_path / "link-to-media"])


@pytest.mark.anyio
async def test_resolve_media_path_runs_off_the_event_loop(media: Path) -> None:
    assert await resolve_media_path("cat.png", [media]) == (media / "cat.png").resolve()
    with pytest.raises(MediaPathError):
        await resolve_media_path("../secret.txt", [media])


def test_find_attachment_by_path_name_or_url() -> None:
    shot = Image(path="/tmp/tool/shot.png")
    report = File(path="/tmp/tool/r-123.pdf", name="report.pdf")
    remote = File(url="https://x.example/a.zip")
    attachments = [shot, report, remote]
    assert find_attachment("/tmp/tool/shot.png", attachments) is shot
    assert find_attachment("/tmp/tool/./shot.png", attachments) is shot
    assert find_attachment("shot.png", attachments) is shot
    assert find_attachment(" report.pdf ", attachments) is report
    assert find_attachment("r-123.pdf", attachments) is report
    assert find_attachment("https://x.example/a.zip", attachments) is remote
    assert find_attachment("other.png", attachments) is None
    assert find_attachment("", attachments) is None
