"""KiraAI's module path for its loggers: `get_logger(name, color)` is a logger under hookchat's (`hookchat.<name>`),
so a KiraAI plugin's lines reach hookchat's console, log file and web console; the colour is ignored."""

from core.utils.log import get_logger

__all__ = ["get_logger"]
