"""Read-only views of the host for SDK plugins: `SystemInfo` (configuration, server settings, Python environment)
and `SdkBus` (the original host's event/memory/frame stores; hookchat publishes nothing to them, so they are empty).
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable
from typing import Any

import core
from core.server import configured_token
from core.services import Err, Ok, Result, SdkError

__all__ = ["SystemInfo", "SdkBus", "BusList", "BusStore"]


class SystemInfo:
    """Host system metadata (`self.system_info`); every method returns a `Result`."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx

    async def get_system_config(self) -> Result[dict[str, Any], SdkError]:
        """`Ok` of the framework version, data directory and plugin directories."""
        manager = getattr(self.ctx, "manager", None)
        if manager is None:
            return Err(SdkError("this plugin is not loaded by a plugin manager", code="not_attached"))
        return Ok(
            {
                "hookchat_version": core.__version__,
                "data_dir": str(manager.data_dir),
                "plugin_dirs": [str(p) for p in manager.plugin_dirs],
            }
        )

    async def get_server_settings(self) -> Result[dict[str, Any], SdkError]:
        """`Ok` of the tool registry's host, port and body limit, and whether a token is configured (never the
        token itself)."""
        app = self.ctx.app
        if app is None:
            return Err(SdkError("no running app", code="not_attached"))
        server = app.config.server
        return Ok(
            {
                "host": server.host,
                "port": server.port,
                "max_body_bytes": server.max_body_bytes,
                "token_configured": configured_token(server) is not None,
                "tool_registry_running": app.tool_server_running,
            }
        )

    async def get_python_env(self) -> Result[dict[str, Any], SdkError]:
        """`Ok` of the Python version, implementation, executable and platform."""
        return Ok(
            {
                "python_version": platform.python_version(),
                "implementation": platform.python_implementation(),
                "executable": sys.executable,
                "platform": platform.platform(),
            }
        )


class BusList(list):
    """A snapshot of bus records with local list operations: `filter`/`where`, `sort`, `limit`."""

    def filter(self, predicate: Callable[[Any], bool] | None = None, **fields: Any) -> BusList:
        """Records matching `predicate` and every `field=value` (`priority_min=n` means priority >= n)."""

        def keep(record: Any) -> bool:
            get = record.get if isinstance(record, dict) else (lambda k, d=None: getattr(record, k, d))
            for key, value in fields.items():
                if key.endswith("_min"):
                    if (get(key[:-4]) or 0) < value:
                        return False
                elif key.endswith("_max"):
                    if (get(key[:-4]) or 0) > value:
                        return False
                elif get(key) != value:
                    return False
            return predicate is None or predicate(record)

        return BusList(r for r in self if keep(r))

    where = filter

    def sort(  # pyright: ignore[reportIncompatibleMethodOverride] - N.E.K.O's sort(by=...) returns a sorted copy
        self,
        *,
        by: str | None = None,
        key: Callable[[Any], Any] | None = None,
        reverse: bool = False,
    ) -> BusList:
        """A sorted copy, by field `by` or by `key`."""
        if by is not None:

            def by_field(record: Any) -> Any:
                return record.get(by) if isinstance(record, dict) else getattr(record, by, None)

            key = by_field

        return BusList(sorted(self, key=key, reverse=reverse))

    def limit(self, n: int) -> BusList:
        """The first `n` records."""
        return BusList(self[: max(0, n)])


class BusStore:
    """One store of the original host's bus. hookchat publishes nothing to it: `get()` is an empty `BusList`."""

    def __init__(self, name: str, *, watchable: bool) -> None:
        self.name = name
        self.watchable = watchable

    async def get(self, **_filters: Any) -> BusList:
        """The records (always none in hookchat)."""
        return BusList()

    def watch(self, *_args: Any, **_kwargs: Any) -> Any:
        """Not available: nothing is published to this bus in hookchat."""
        raise SdkError(
            f"bus.{self.name}.watch() is not available in hookchat: nothing publishes to this bus", code="not_supported"
        )


class SdkBus:
    """`self.bus`: read-only facade of the original host's state stores. Empty in hookchat (see docs/sdk.md);
    use hooks (`@on.im_message()`, `@on.final_result()`...) to observe conversations here."""

    def __init__(self) -> None:
        self.messages = BusStore("messages", watchable=True)
        self.events = BusStore("events", watchable=True)
        self.lifecycle = BusStore("lifecycle", watchable=True)
        self.conversations = BusStore("conversations", watchable=False)
        self.memory = BusStore("memory", watchable=False)
        self.frames = BusStore("frames", watchable=False)
