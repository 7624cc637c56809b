"""Tags in the model's output: `BaseTag`, `FunctionTag` and `TagSet` declare them; `parse_output`, `StreamParser`
and `parse_stream` turn the model's `<msg>` blocks into one `MessageChain` per outgoing message."""

from typing import TYPE_CHECKING

from core.tag._tags import (
    RESERVED_TAG_NAMES,
    BaseTag,
    FunctionTag,
    TagDefinitionError,
    TagSet,
    TagTimeout,
    current_event,
    validate_tag_name,
)
from core.tag.paths import MediaPathError, check_media_path, find_attachment, resolve_media_path
from core.tag.urls import MENTION_ALL_IDS, MediaPolicy, MediaURLError, is_mention_all
from core.utils.lazy import lazy_names

# The parser is imported on first use (PEP 562), with the agent loop that runs it at the first turn: a command that
# runs no turn (`hookchat plugins`) does not import it (docs/performance.md).
_LAZY: dict[str, str] = dict.fromkeys(
    ("OnTagError", "StreamParser", "decode_references", "parse_output", "parse_stream"), "core.tag._parser"
)

if TYPE_CHECKING:  # what the checker sees of the lazy names
    from core.tag._parser import OnTagError, StreamParser, decode_references, parse_output, parse_stream


__getattr__ = lazy_names(__name__, _LAZY)


__all__ = [
    "BaseTag",
    "FunctionTag",
    "TagSet",
    "TagDefinitionError",
    "TagTimeout",
    "validate_tag_name",
    "RESERVED_TAG_NAMES",
    "current_event",
    "parse_output",
    "parse_stream",
    "StreamParser",
    "OnTagError",
    "decode_references",
    "MediaPathError",
    "check_media_path",
    "resolve_media_path",
    "find_attachment",
    "MediaPolicy",
    "MediaURLError",
    "MENTION_ALL_IDS",
    "is_mention_all",
]
