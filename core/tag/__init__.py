"""Tags in the model's output: `BaseTag`, `FunctionTag` and `TagSet` declare them; `parse_output`, `StreamParser`
and `parse_stream` turn the model's `<msg>` blocks into one `MessageChain` per outgoing message."""

from core.tag._parser import OnTagError, StreamParser, decode_references, parse_output, parse_stream
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
