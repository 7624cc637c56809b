"""The dataclasses' generated methods, compiled by the first command and reused by the next ones
(`core/utils/dataclass_code.py`): the classes they make are the classes `@dataclass` makes."""

import dataclasses
import marshal
import sys

import pytest

from core.utils import dataclass_code
from core.utils.dataclass_code import reused_dataclass_code


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """The cache file, in a folder of the test's own, with bytecode writing on (whatever this shell says)."""
    path = tmp_path / "__pycache__" / "dataclass_code.test.dataclasses"
    monkeypatch.setattr(dataclass_code, "_file", lambda: path)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    return path


@pytest.fixture
def compiled(monkeypatch):
    """The texts the block compiles (rather than finding them in the file)."""
    texts: list[str] = []

    def counting(source, *args, **kwargs):
        texts.append(source)
        return compile(source, *args, **kwargs)

    monkeypatch.setattr(dataclass_code, "compile", counting, raising=False)
    return texts


def make_point():
    @dataclasses.dataclass(frozen=True)
    class Point:
        x: int
        y: int = 0
        tags: tuple[str, ...] = dataclasses.field(default_factory=tuple)

    return Point


def test_a_second_command_compiles_nothing_and_makes_the_same_class(cache, compiled):
    with reused_dataclass_code():
        first = make_point()
    assert compiled and cache.exists(), "the first command compiles the methods and keeps them"
    compiled.clear()
    written = cache.stat().st_mtime_ns
    with reused_dataclass_code():
        second = make_point()
    assert compiled == [], "the second finds them all in the file"
    assert cache.stat().st_mtime_ns == written, "and, having compiled nothing, does not write it again"
    for cls in (first, second):
        p = cls(1)
        assert (p, hash(p), repr(p)) == (cls(1, 0, ()), hash(cls(1)), f"{cls.__qualname__}(x=1, y=0, tags=())")
        with pytest.raises(dataclasses.FrozenInstanceError):
            p.x = 2  # type: ignore[misc] - the frozen class refuses it
        # Compiled as dataclasses compiles them: no `from __future__ import annotations` from the cache's module.
        assert cls.__init__.__annotations__["x"] is int


def test_a_changed_class_is_a_new_entry(cache, compiled):
    with reused_dataclass_code():
        make_point()

    compiled.clear()
    with reused_dataclass_code():

        @dataclasses.dataclass
        class Point:
            x: int
            label: str = "?"

    assert any("label" in text for text in compiled)
    assert Point(1) == Point(1, "?") and Point(1).label == "?"


def test_a_file_of_another_python_or_damaged_is_ignored_and_replaced(cache, compiled):
    cache.parent.mkdir()
    for content in (b"not marshal", marshal.dumps((b"\x00\x00\r\n", {"def f(): pass": None}))):
        cache.write_bytes(content)
        compiled.clear()
        with reused_dataclass_code():
            cls = make_point()
        assert compiled and cls(3).x == 3
        magic, codes = marshal.loads(cache.read_bytes())
        assert magic == dataclass_code.importlib.util.MAGIC_NUMBER and codes


def test_nothing_is_written_without_bytecode_writing(cache, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    with reused_dataclass_code():
        make_point()
    assert not cache.exists()


def test_the_block_leaves_dataclasses_as_it_found_it(cache):
    with reused_dataclass_code():
        with reused_dataclass_code():
            make_point()
        assert "exec" in vars(dataclasses)
        make_point()
    assert "exec" not in vars(dataclasses)
