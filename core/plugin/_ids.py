"""Plugin ids: which strings may be one, and the module name a plugin's code is imported under.

KiraAI accepts any string as a `plugin_id` (real plugins use ids such as `default-chat（z）`), so hookchat does too,
except what would break the places an id is used: it names the plugin's data directory, so it may not be empty,
`.` or `..`, hold a path separator or a control character, or be longer than 128 characters. The id is shown
everywhere as written; only the module name is made safe.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

__all__ = ["check_plugin_id", "module_name_for", "MAX_PLUGIN_ID_LENGTH"]

MAX_PLUGIN_ID_LENGTH = 128
_SAFE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_plugin_id(value: object) -> str:
    """`value` if it can be a plugin id, else `ValueError` saying why."""
    if not isinstance(value, str):
        raise ValueError(f"a plugin id is a string, not {type(value).__name__}")
    if not value.strip():
        raise ValueError("a plugin id may not be empty")
    if value in (".", ".."):
        raise ValueError(f"{value!r} cannot be a plugin id: it names a directory of its own")
    if len(value) > MAX_PLUGIN_ID_LENGTH:
        raise ValueError(f"a plugin id has at most {MAX_PLUGIN_ID_LENGTH} characters, not {len(value)}")
    bad = next((c for c in value if c in "/\\" or unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")), None)
    if bad is not None:
        raise ValueError(
            f"plugin id {value!r} may not contain {bad!r} (path separators and control characters "
            "would break its data directory)"
        )
    return value


def module_name_for(plugin_id: str) -> str:
    """A Python identifier for the plugin's package, unique per id: the id itself when it is an identifier
    without `__`, else its ASCII letters and digits, `__` and a hash of the whole id (so `a-b`, `a.b` and `a_b`
    never share a module). Only hashed names contain `__`, so no id can be named like another's hashed name."""
    if _SAFE.fullmatch(plugin_id) and "__" not in plugin_id:
        return plugin_id
    slug = re.sub(r"[^0-9A-Za-z]+", "_", plugin_id).strip("_")[:40].strip("_") or "plugin"
    digest = hashlib.sha256(plugin_id.encode("utf-8")).hexdigest()[:10]
    return f"{slug}__{digest}" if slug[0].isalpha() else f"p_{slug}__{digest}"
