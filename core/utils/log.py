"""Logging, one convention for all of hookchat: the framework's modules log to `hookchat` or a child of it
(`get_logger("provider")` is `hookchat.provider`); a plugin logs through its `PluginLogger`, over
`hookchat.plugin.<plugin_id>`, which accepts both `%s` and `{}` placeholders, so
`logger.info("Processing request: {}", request_id)` works as seed 002 writes it.
"""

from __future__ import annotations

import logging
import re
import string
from collections.abc import MutableMapping
from typing import Any

__all__ = ["logger", "get_logger", "PluginLogger", "get_plugin_logger", "format_braces"]

#: The framework's logger; every other hookchat logger is its child, so one handler sees everything.
logger = logging.getLogger("hookchat")


def get_logger(name: str, color: str | None = None) -> logging.Logger:
    """A logger for `name` under the framework's logger (`hookchat.<name>`).

    `color` is accepted for plugins written for KiraAI, whose console colours a logger's name; it is ignored here.
    """
    return logger.getChild(name)


# A %-style conversion: when one is present the message is left to logging's own %-formatting.
_PERCENT = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(?:\d+|\*)?(?:\.(?:\d+|\*))?[diouxXeEfFgGcrsa]")
_FORMATTER = string.Formatter()


def format_braces(msg: object, args: tuple[Any, ...]) -> tuple[object, tuple[Any, ...]]:
    """Apply `{}`-style `args` to `msg` when it uses braces and no `%` conversion; otherwise leave both as they are.

    A message whose placeholders do not fit the arguments is left untouched (logging then shows it as is), and so
    is one with any field but `{}`, `{0}` (with `!r` and a plain format spec): no attribute or index access, so
    text a user wrote never reads the process's objects into a log, even when it ends up as the template.
    """
    if not args or not isinstance(msg, str) or _PERCENT.search(msg) or "{" not in msg:
        return msg, args
    try:
        fields = list(_FORMATTER.parse(msg))
    except ValueError:  # unbalanced braces: not a template
        return msg, args
    for _, name, spec, _ in fields:
        # Only `{}`/`{0}` with a plain spec: a field like `{0.__init__.__globals__}` or `{0[key]}` would read
        # attributes and items of the arguments, and a nested `{:{}}` spec formats twice.
        if name is not None and (name and not name.isdigit() or "{" in (spec or "")):
            return "%s" + " %r" * len(args), (msg, *args)  # shown as written, the arguments beside it
    try:
        return msg.format(*args), ()
    except (IndexError, KeyError, ValueError, AttributeError, TypeError):
        return msg, args


class PluginLogger(logging.LoggerAdapter):
    """A plugin's logger: `%s` and `{}` placeholders both work; records carry `plugin_id` in `extra`."""

    def __init__(self, logger: logging.Logger, plugin_id: str) -> None:
        super().__init__(logger, {"plugin_id": plugin_id})
        self.plugin_id = plugin_id

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        extra = dict(self.extra or {})
        extra.update(kwargs.get("extra") or {})
        kwargs["extra"] = extra
        return msg, kwargs

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if not self.isEnabledFor(level):
            return
        msg, args = format_braces(msg, args)
        msg, options = self.process(msg, kwargs)
        # One frame more than logging expects (this adapter's own), so records name the plugin's line.
        options["stacklevel"] = options.get("stacklevel", 1) + 1
        self.logger.log(level, msg, *args, **options)


def get_plugin_logger(plugin_id: str, name: str | None = None) -> PluginLogger:
    """The logger of plugin `plugin_id` (`hookchat.plugin.<plugin_id>`, or a child `name` of it)."""
    base = logger.getChild(f"plugin.{plugin_id}")
    return PluginLogger(base.getChild(name) if name else base, plugin_id)
