"""KiraAI's import path for `AdapterInfo` (defined with the data model, in `core.chat.session`)."""

from core.chat.session import AdapterInfo

__all__ = ["AdapterInfo"]
