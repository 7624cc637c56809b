"""OneBot v11 (QQ through NapCat, Lagrange.OneBot, go-cqhttp...): the adapter, its errors, and the conversions
between OneBot messages (segment arrays, CQ-code strings) and hookchat's message elements.

    [[adapters.instances]]
    type = "onebot"
    name = "qq"
    options = { url = "ws://127.0.0.1:3001", token_env = "ONEBOT_TOKEN" }

See docs/adapters.md (the contract and this adapter's behaviour) and docs/configuration.md (every option).
"""

from core.adapter.onebot._adapter import CAPABILITIES, OneBotAdapter, OneBotStats
from core.adapter.onebot._connection import (
    ActionFailed,
    ActionTimeout,
    ConnectionLost,
    NotConnected,
    OneBotError,
)
from core.adapter.onebot._cqcode import escape, parse_cq, to_cq, unescape
from core.adapter.onebot._options import OneBotOptions
from core.adapter.onebot._segments import to_chain, to_messages, to_segments

__all__ = [
    "OneBotAdapter",
    "OneBotOptions",
    "OneBotStats",
    "CAPABILITIES",
    "OneBotError",
    "ActionFailed",
    "ActionTimeout",
    "NotConnected",
    "ConnectionLost",
    "escape",
    "unescape",
    "parse_cq",
    "to_cq",
    "to_chain",
    "to_segments",
    "to_messages",
]
