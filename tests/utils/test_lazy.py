"""`lazy_names`: a package's names imported from their modules when first read (PEP 562), then kept."""

from __future__ import annotations

import sys
import types

import pytest

from core.utils.lazy import lazy_names


@pytest.fixture
def package(tmp_path, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """`lazypkg`, a package whose `answer` lives in `lazypkg_deep`, a module nobody imported yet."""
    (tmp_path / "lazypkg_deep.py").write_text("answer = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = types.ModuleType("lazypkg")
    module.__getattr__ = lazy_names("lazypkg", {"answer": "lazypkg_deep"})  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "lazypkg", module)
    monkeypatch.delitem(sys.modules, "lazypkg_deep", raising=False)
    return module


def test_a_lazy_name_is_imported_when_first_read_and_then_kept(package: types.ModuleType) -> None:
    assert "lazypkg_deep" not in sys.modules

    from lazypkg import answer  # type: ignore[import-not-found]

    assert answer == 42
    assert "lazypkg_deep" in sys.modules
    assert vars(package)["answer"] == 42  # kept: the next read does not come back to __getattr__


def test_any_other_name_is_an_attribute_error(package: types.ModuleType) -> None:
    with pytest.raises(AttributeError, match="module 'lazypkg' has no attribute 'question'"):
        package.question  # noqa: B018
    assert "lazypkg_deep" not in sys.modules
