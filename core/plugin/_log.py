"""Logging: the framework logger and one child logger per plugin (`hookchat.plugin.<plugin_id>`)."""

from __future__ import annotations

import logging

__all__ = ["logger", "get_logger"]

#: The framework's logger; plugin loggers are its children, so one handler sees everything.
logger = logging.getLogger("hookchat")


def get_logger(name: str, color: str | None = None) -> logging.Logger:
    """A logger for `name` under the framework's logger (plugins get `hookchat.plugin.<plugin_id>` this way).

    `color` is accepted for plugins written for KiraAI, whose console colours a logger's name; it is ignored here.
    """
    return logger.getChild(name)
