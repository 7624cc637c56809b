"""Guarded import of a plugin's code: the manifest's `core_version` checked, the code imported in a daemon thread
under a package name of its own (so a reload, or an import abandoned at the start-up deadline, never collides),
its plugin class found, and its modules forgotten again when it stops (their bytecode caches deleted before this
process imports a plugin again, never at the stop: the next process reads them as it reads any module's)."""

from __future__ import annotations

import asyncio
import importlib
import importlib.machinery
import importlib.util
import inspect
import itertools
import sys
import threading
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio

import core
from core.plugin._base import BasePlugin
from core.plugin._ids import module_name_for
from core.plugin._source import Manifest, PluginLoadError, PluginSource
from core.utils.log import logger

__all__ = [
    "ENTRY_MODULES",
    "KIRA_API_VERSION",
    "check_core_version",
    "find_plugin_class",
    "forget_caches",
    "forget_modules",
    "import_plugin",
]

ENTRY_MODULES = ("main.py", "plugin.py", "__init__.py")

#: The KiraAI version whose plugin API hookchat implements (the one seed 003 documents), for manifests written for
#: KiraAI, whose `core_version` counts in KiraAI's versions. It is the `VERSION` of KiraAI's core/config/default.py
#: (v2.26.2) in the KiraAI source this compatibility was built against; see docs/plugins.md, "Plugins written for
#: KiraAI".
KIRA_API_VERSION = "2.26.2"
_MODULE_ROOT = "hookchat_plugins"
T = TypeVar("T")


def check_core_version(manifest: Manifest) -> str | None:
    """Check the manifest's `core_version` (a PEP 440 specifier; pre-releases count, as in KiraAI) against
    hookchat's version, then against the KiraAI plugin API version hookchat implements: a plugin written for
    KiraAI states the KiraAI version it needs. Returns which one satisfied it (None without a `core_version`);
    raises `PluginLoadError` when neither does."""
    wanted = manifest.core_version
    if not wanted:
        return None
    # Imported by the first manifest that states a core_version (the built-in plugins state none): packaging
    # compiles its version and specifier expressions at import, 2% of a `hookchat plugins` (docs/performance.md).
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import Version

    try:
        spec = SpecifierSet(wanted, prereleases=True)
    except InvalidSpecifier as exc:
        raise PluginLoadError(f"core_version {wanted!r} is not a PEP 440 specifier") from exc
    if Version(core.__version__) in spec:
        return f"core_version {wanted!r} satisfied by hookchat {core.__version__}"
    if Version(KIRA_API_VERSION) in spec:
        return f"core_version {wanted!r} satisfied by the KiraAI plugin API {KIRA_API_VERSION} that hookchat implements"
    raise PluginLoadError(
        f"needs hookchat {wanted}, but this is hookchat {core.__version__}, "
        f"and the KiraAI plugin API it implements ({KIRA_API_VERSION}) does not satisfy it either"
    )


async def import_plugin(source: PluginSource) -> tuple[type, list[str]]:
    """Import the plugin's code in a daemon thread and find its plugin class, with the modules it imported
    (raises `PluginLoadError`). A folder's code is imported
    under a package name no other import holds: the running version's (a reload) and one an abandoned
    import still executes are skipped, so a fixed save imports although that thread holds its import lock."""
    if source.plugin_class is not None:
        return source.plugin_class, []
    if source.entry_point is not None:
        entry_point = source.entry_point

        def load_entry_point() -> tuple[type, list[str]]:
            try:
                obj = entry_point.load()
            except BaseException as exc:
                raise PluginLoadError(
                    f"import of entry point {entry_point.value} failed: {type(exc).__name__}: {exc}"
                ) from exc
            cls = obj if isinstance(obj, type) else find_plugin_class(obj, source.plugin_id)
            return cls, []

        return await _in_daemon_thread(load_entry_point, f"import of entry point {entry_point.name}")
    assert source.path is not None
    package = _free_package_name(source.plugin_id)
    try:
        return await _in_daemon_thread(lambda: _import_folder(source, package), f"import of {package}")
    except anyio.get_cancelled_exc_class():
        _ABANDONED.add(package)  # the thread runs on, holding the package's import lock
        raise


#: Package names whose import was abandoned at the start-up deadline: its thread may still hold their import lock.
_ABANDONED: set[str] = set()


def _free_package_name(plugin_id: str) -> str:
    """`hookchat_plugins.<module name>`, or the same under `hookchat_plugins_2`, `_3`, ... when that name is
    taken (by the running version of the plugin, or by an abandoned import); the root module is made if needed."""
    name = module_name_for(plugin_id)
    roots = (_MODULE_ROOT if n == 1 else f"{_MODULE_ROOT}_{n}" for n in itertools.count(1))
    root = next(r for r in roots if f"{r}.{name}" not in sys.modules and f"{r}.{name}" not in _ABANDONED)
    package = f"{root}.{name}"
    if root not in sys.modules:
        module = types.ModuleType(root)
        module.__path__ = []
        sys.modules[root] = module
    return package


async def _in_daemon_thread(work: Callable[[], T], name: str) -> T:
    """Run `work` in a new daemon thread and await its result. Cancelling the caller abandons the thread: it
    runs on until `work` returns, and being a daemon it never keeps the process from exiting."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():
            future.set_result(value) if ok else future.set_exception(value)

    def run() -> None:
        try:
            outcome = (True, work())
        except BaseException as exc:
            outcome = (False, exc if isinstance(exc, Exception) else PluginLoadError(f"{type(exc).__name__}: {exc}"))
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    threading.Thread(target=run, name=f"hookchat {name}", daemon=True).start()
    return await future


def _import_folder(source: PluginSource, package: str) -> tuple[type, list[str]]:
    folder = source.path
    assert folder is not None
    entry = next((name for name in ENTRY_MODULES if (folder / name).is_file()), None)
    if entry is None:
        raise PluginLoadError(f"{folder} has no entry module ({', '.join(ENTRY_MODULES)})")
    importlib.invalidate_caches()  # a file added since the last import must be found
    _delete_stale_caches()  # a plugin forgotten in this process: its files are read as they are now
    try:
        init = folder / "__init__.py"
        if init.is_file():
            spec = importlib.util.spec_from_file_location(package, init, submodule_search_locations=[str(folder)])
        else:
            # spec_from_file_location() gives None without a file: build the package spec for the bare folder.
            spec = importlib.machinery.ModuleSpec(package, None, is_package=True)
            spec.submodule_search_locations = [str(folder)]
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[package] = module
        if spec.loader is not None:
            spec.loader.exec_module(module)
        if entry != "__init__.py":
            module = importlib.import_module(f"{package}.{entry[:-3]}")
    except BaseException as exc:
        for name in _package_modules(package):
            sys.modules.pop(name, None)
        raise PluginLoadError(
            f"import of {folder / entry} failed: {_where_it_failed(exc, folder)}{type(exc).__name__}: {exc}"
        ) from exc
    return find_plugin_class(module, source.plugin_id, source.manifest), _package_modules(package)


def _where_it_failed(exc: BaseException, folder: Path) -> str:
    """`file:line: source line` of the plugin's own code where `exc` arose (its innermost frame in `folder`, or
    the place a `SyntaxError` points at), followed by a space; "" when no frame of the plugin is involved."""
    if isinstance(exc, SyntaxError) and exc.filename:
        file, line, text = exc.filename, exc.lineno or 0, (exc.text or "").strip()
    else:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).is_relative_to(folder)]
        if not frames:
            return ""
        file, line, text = frames[-1].filename, frames[-1].lineno or 0, (frames[-1].line or "").strip()
    return f"{file}:{line}: {text!r}: " if text else f"{file}:{line}: "


def _package_modules(package: str) -> list[str]:
    """The plugin's own modules. Libraries it imported stay: another copy of a library breaks its users (and
    extension modules cannot be imported twice)."""
    return sorted(m for m in list(sys.modules) if m == package or m.startswith(package + "."))


def forget_modules(modules: list[str]) -> None:
    """Drop a stopped plugin's modules, their bytecode caches stale (`forget_caches`)."""
    forget_caches(modules)
    for name in modules:
        sys.modules.pop(name, None)


#: The bytecode caches of plugin modules this process imported and then forgot (`forget_caches`), deleted before
#: its next import of a plugin (`_import_folder`).
_STALE_CACHES: set[str] = set()
_STALE_LOCK = threading.Lock()


def forget_caches(modules: list[str]) -> None:
    """Mark the bytecode caches of a plugin's modules stale: the next import of a plugin in this process deletes
    them first, so it runs the files as they are then (a cache is trusted while the source keeps its size and its
    mtime in whole seconds, which misses an edit saved within the same second). They are not deleted here: when a
    bot stops, the next process would compile every plugin again, as `hookchat plugins` did at every run; it trusts
    them as Python trusts any module's cache."""
    cached = {getattr(getattr(sys.modules.get(name), "__spec__", None), "cached", None) for name in modules}
    with _STALE_LOCK:
        _STALE_CACHES.update(path for path in cached if path)


def _delete_stale_caches() -> None:
    with _STALE_LOCK:
        stale = list(_STALE_CACHES)
        _STALE_CACHES.clear()
    for path in stale:
        try:
            Path(path).unlink(missing_ok=True)
        except OSError:
            pass


def find_plugin_class(module: Any, plugin_id: str, manifest: Manifest | None = None) -> type:
    """The plugin class: `entry_class` from the manifest, else the `BasePlugin` subclass the plugin's own code
    defines (in the entry module or a module of its package). Several: one from the entry module wins, then the
    first by name, with a warning, as KiraAI does."""
    wanted = (manifest.model_extra or {}).get("entry_class") if manifest else None
    name = getattr(module, "__name__", "")
    package = name if hasattr(module, "__path__") else name.rpartition(".")[0] or name
    classes = sorted(
        (
            obj
            for obj in vars(module).values()
            if isinstance(obj, type)
            and issubclass(obj, BasePlugin)
            and (obj.__module__ == package or obj.__module__.startswith(package + "."))
            and not inspect.isabstract(obj)
            and (wanted is None or obj.__name__ == wanted)
        ),
        key=lambda cls: (cls.__module__ != name, cls.__name__),
    )
    if not classes:
        raise PluginLoadError(
            f"plugin {plugin_id!r}: no BasePlugin subclass in {name}"
            + (f" called {wanted!r} (entry_class in manifest.json)" if wanted else "")
        )
    if len(classes) > 1:
        logger.warning(
            'plugin %r: several plugin classes (%s); loading %s (set "entry_class" in manifest.json to choose)',
            plugin_id,
            ", ".join(c.__name__ for c in classes),
            classes[0].__name__,
        )
    return classes[0]
