"""The dataclasses' generated methods, compiled by the first command and reused by the next ones
(`core/utils/compiled_code.py`): the classes they make are the classes `@dataclass` makes."""

import dataclasses
import marshal
import sys
import typing

import pytest

from core.utils import compiled_code
from core.utils.compiled_code import reused_compiled_code


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """The cache file, in a folder of the test's own, with bytecode writing on (whatever this shell says)."""
    path = tmp_path / "__pycache__" / "test.code"
    monkeypatch.setattr(compiled_code, "_file", lambda name: path.with_name(f"{name}.code"))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    return path


@pytest.fixture
def compiled(monkeypatch):
    """The texts the block compiles (rather than finding them in the file)."""
    texts: list[str] = []

    def counting(source, *args, **kwargs):
        texts.append(source)
        return compile(source, *args, **kwargs)

    monkeypatch.setattr(compiled_code, "compile", counting, raising=False)
    return texts


def make_point():
    @dataclasses.dataclass(frozen=True)
    class Point:
        x: int
        y: int = 0
        tags: tuple[str, ...] = dataclasses.field(default_factory=tuple)

    return Point


def test_a_second_command_compiles_nothing_and_makes_the_same_class(cache, compiled):
    with reused_compiled_code("test"):
        first = make_point()
    assert compiled and cache.exists(), "the first command compiles the methods and keeps them"
    compiled.clear()
    written = cache.stat().st_mtime_ns
    with reused_compiled_code("test"):
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
    with reused_compiled_code("test"):
        make_point()

    compiled.clear()
    with reused_compiled_code("test"):

        @dataclasses.dataclass
        class Point:
            x: int
            label: str = "?"

    assert any("label" in text for text in compiled)
    assert Point(1) == Point(1, "?") and Point(1).label == "?"


def test_a_file_of_another_python_or_damaged_is_ignored_and_replaced(cache, compiled):
    cache.parent.mkdir()
    for content in (b"not marshal", marshal.dumps((b"\x00\x00\r\n", {("def f(): pass", "exec"): None}))):
        cache.write_bytes(content)
        compiled.clear()
        with reused_compiled_code("test"):
            cls = make_point()
        assert compiled and cls(3).x == 3
        magic, codes = marshal.loads(cache.read_bytes())
        assert magic == compiled_code.importlib.util.MAGIC_NUMBER and codes


class Stock:
    size: "dict[str, list[int]]"


def test_an_annotation_written_as_a_string_is_compiled_once(cache, compiled):
    with reused_compiled_code("test"):
        assert typing.get_type_hints(Stock) == {"size": dict[str, list[int]]}
    assert compiled == ["dict[str, list[int]]"]
    compiled.clear()
    with reused_compiled_code("test"):
        assert typing.get_type_hints(Stock) == {"size": dict[str, list[int]]}
        with pytest.raises(SyntaxError, match="Forward reference must be an expression"):
            typing.ForwardRef("not an expression")
    assert compiled == ["not an expression"]


def test_each_command_has_its_own_file(cache, compiled):
    with reused_compiled_code("test"):
        make_point()
    compiled.clear()
    with reused_compiled_code("other"):
        make_point()
    assert compiled, "another command reads only what it compiled itself"
    assert cache.with_name("other.code").exists()


def test_nothing_is_written_without_bytecode_writing(cache, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    with reused_compiled_code("test"):
        make_point()
    assert not cache.exists()


def test_the_block_leaves_dataclasses_and_typing_as_it_found_them(cache):
    with reused_compiled_code("test"):
        with reused_compiled_code("test"):
            make_point()
        assert "exec" in vars(dataclasses) and "compile" in vars(typing)
        make_point()
    assert "exec" not in vars(dataclasses) and "compile" not in vars(typing)
