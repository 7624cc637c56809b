"""The parser of the model's output: `<msg>` blocks of text and tags in, one `MessageChain` per outgoing message out.
It is tolerant (it never raises and keeps every character the user should see), linear in time, and streaming:
any chunking of the output gives the same messages as parsing it whole. Its text is always valid Unicode."""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any

from core.chat import BaseMessageElement, MessageChain
from core.chat.message_elements import Text
from core.tag._tags import BaseTag, TagSet, TagTimeout, _current_event
from core.utils.tasks import must_propagate
from core.utils.text import valid_text

__all__ = ["StreamParser", "parse_output", "parse_stream", "decode_references", "OnTagError"]

_log = logging.getLogger("hookchat.tag")

#: `async (tag, exc) -> None`: told about every tag handler that raised (the agent loop reports it like a hook).
OnTagError = Callable[[BaseTag, BaseException], Awaitable[None]]

_HIDDEN = ("think", "reasoning")
_STRUCTURAL = ("msg", *_HIDDEN)

# Character references: the five XML names and numeric ones. Anything else (a bare `&`, `&foo;`, a DTD's entity)
# is text, never expanded. Digit counts are bounded so a reference is at most 10 characters long.
_REF = re.compile(r"&(?:#([0-9]{1,7})|#[xX]([0-9a-fA-F]{1,6})|amp|lt|gt|quot|apos);")
_REF_MAX = 10
_NAMED = {"&amp;": "&", "&lt;": "<", "&gt;": ">", "&quot;": '"', "&apos;": "'"}

_SLICE = 1 << 16  # parse_output feeds long outputs in slices of this many characters

_NO_ATTRIBUTES: dict[str, str] = {}  # shared, never mutated: handlers receive a copy through **attrs
_ATTR = re.compile(r"""([^\s=/"']+)(?:\s*=\s*(?:"([^"]*)"?|'([^']*)'?|([^\s"']+)))?""")

# Stream waits: after stopping at an unfinished construct, new data is only rescanned once it holds what could
# finish it, so a long unfinished construct fed in small chunks is not rescanned for every chunk.
_WAIT_TAG = re.compile(r"[<>]")
_WAIT_COMMENT = re.compile(r"-->")
_WAIT_CDATA = re.compile(r"]]>")
_WAIT_DOCTYPE = re.compile(r"]>")

# Openers whose end is searched separately: (end mark, what to wait for in a stream, is the content text?).
# Comments and a DOCTYPE's internal subset are dropped (entities are never expanded); CDATA content is kept as is.
_COMMENT = ("-->", _WAIT_COMMENT, False)
_CDATA = ("]]>", _WAIT_CDATA, True)
_DOCTYPE = ("]>", _WAIT_DOCTYPE, False)


@functools.lru_cache(maxsize=128)
def _token_re(names: tuple[str, ...], missing: frozenset[str] = frozenset()) -> re.Pattern[str]:
    """One regex that finds the next piece of markup the parser acts on.

    Only tags whose names are known match, so unknown tags, stray `<` and `<3` are skipped inside the regex
    engine as plain text. A tag cannot contain `<` or `>` in between, so every attempt stops at the next `<`:
    the scan is linear however the output is broken. A tag followed by plain text and its end tag
    (`<text>hi</text>`) is taken in one match, for speed; it means exactly the same as three separate pieces.
    `missing` holds the end marks known to be absent from the rest of the output: their openers are then text,
    and leaving them out of the regex keeps a megabyte of `<!--` from costing a Python step each.
    """
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    openers = "".join(
        opener + "|" for mark, opener in (("-->", "--"), ("]]>", r"(?i:\[CDATA\[)")) if mark not in missing
    )
    return re.compile(
        # The boundary between two messages (`</msg>`, layout whitespace, `<msg>`), the usual case, in one match: it
        # means exactly the same as its two tags.
        # (Every alternative starts with `<`: the regex engine then finds the next `<` at C speed. This one is marked
        # by an empty group at its end, not a group around it: the engine skips an alternative whose first character
        # does not match without entering it, so at a `<` not followed by `/` it costs nothing.)
        r"<(?:/(?ai:msg)>[ \t\r\n]*+<(?ai:msg)>()"
        # A known tag: slash, name, then its attributes, where a quoted value may hold `>` (a value cannot hold
        # `<`, so every attempt still stops at the next `<`); with a quote left open, the tag ends at the first `>`.
        r"|(/?)(?ai:(" + alternatives + r"))(?=[\s/>])"
        r"(?:((?:[^<>\"']++|\"[^\"<]*\"|'[^'<]*')*+)|([^<>]*))>"
        r"(?:([^<]*+)</(?ai:\3)\s*>)?"  # ... and, if they follow, its plain text and end tag
        r"|!(?:" + openers + r"(?i:DOCTYPE)[^<>\[]*\["  # openers whose end is searched separately
        r"|[A-Za-z][^<>]*>)|\?[^<>]*>)"  # declarations (<!ENTITY ...>) and <?xml ?>: dropped
    )


@functools.lru_cache(maxsize=8)
def _hidden_end_re(name: str, in_msg: bool) -> re.Pattern[str]:
    """The end of a hidden block; inside a `<msg>`, its `</msg>` ends an unclosed `<think>` too, so a model that
    writes the word `<think>` in prose loses that sentence's rest, never the following messages."""
    return re.compile(r"</(?ai:" + name + (r"|msg" if in_msg else "") + r")\s*>")


def _ref(m: re.Match[str]) -> str:
    """The character a reference stands for; a reference to no character (NUL, a surrogate) stays as written."""
    ref = m[0]
    named = _NAMED.get(ref)
    if named is not None:
        return named
    code = int(m[1]) if m.lastindex == 1 else int(m[2], 16)
    if code == 0 or 0xD800 <= code <= 0xDFFF or code > 0x10FFFF:
        return ref
    return chr(code)


def decode_references(text: str) -> str:
    """Decode `&amp; &lt; &gt; &quot; &apos;` and numeric references (`&#39;`, `&#x1F600;`); keep anything else."""
    if "&" not in text:
        return text
    if "&#" in text:
        return _REF.sub(_ref, text)
    # Named references only: replacing them in C is the same (none can overlap another or form a new one when
    # `&amp;` goes last), and much faster than a Python call per reference.
    return (
        text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", '"')
        .replace("&apos;", "'")
        .replace("&amp;", "&")
    )


def _may_grow(tail: str) -> bool:
    """Could `tail` (from the last `<` to the end of the data so far) still become markup with more data?"""
    if ">" in tail:
        return False
    if len(tail) == 1:
        return True
    c = tail[1]
    if c == "!":
        if len(tail) == 2 or (tail[2].isascii() and tail[2].isalpha()):
            return True
        return "<!--".startswith(tail) or "<![CDATA[".startswith(tail.upper())
    return c in "/?_" or (c.isascii() and c.isalpha())


def _may_end_hidden(tail: str, name: str, in_msg: bool) -> bool:
    """Could `tail` still become the `</think>` (or `</reasoning>`, or inside a message `</msg>`) that ends the
    hidden block?"""
    low = tail.lower()
    for end in ("</" + name, "</msg") if in_msg else ("</" + name,):
        if end.startswith(low) or (low.startswith(end) and (len(low) == len(end) or low[len(end) :].isspace())):
            return True
    return False


_QUOTED = re.compile(r""""[^"]*"|'[^']*'""")


def _quote_open(text: str) -> bool:
    """Does `text` (a tag's attributes) leave a quote open?"""
    rest = _QUOTED.sub("", text)
    return '"' in rest or "'" in rest


def _attributes(text: str) -> dict[str, str]:
    """`id=1 name="a b" flag` as `{"id": "1", "name": "a b", "flag": ""}`: names lower-cased, values decoded."""
    return {name.lower(): decode_references(dq or sq or bare) for name, dq, sq, bare in _ATTR.findall(text)}


def _start_tag_rest(rest: str) -> tuple[dict[str, str], str, bool]:
    """What follows a start tag's name: (attributes, the value given as an attribute, is it self-closing).

    Attributes named `value` and `self` would collide with the handler's parameters: `value` becomes the value
    when the tag has no inner text, `self` is dropped.
    """
    rest = rest.rstrip()
    alone = rest.endswith("/")
    attrs = _attributes(rest[:-1] if alone else rest)
    default = attrs.pop("value", "")
    attrs.pop("self", None)
    return attrs, default, alone


def _add_elements(chain: MessageChain, result: Any, tag: BaseTag) -> None:
    """Append a handler's return value to `chain`: None, one element, a str or an iterable of them. Empty Texts are
    dropped; anything else raises TypeError, and then nothing is appended."""
    if result is None:
        return
    if isinstance(result, (BaseMessageElement, str)):
        result = [result]
    elements: list[BaseMessageElement] = []
    for element in result:
        if isinstance(element, str):
            element = Text(element)
        elif not isinstance(element, BaseMessageElement):
            raise TypeError(f"tag <{tag.name}> returned {element!r}; a handler returns message elements")
        if not (isinstance(element, Text) and not element.text):
            elements.append(element)
    chain.extend(elements)


# An operation of a message being assembled: bare text, or a tag occurrence (tag, value, attributes) whose
# handler runs once the message is complete.
_TagOp = tuple[BaseTag, str, dict[str, str]]
_Op = str | _TagOp


class StreamParser:
    """Parses the model's output chunk by chunk; `feed()` returns each message as soon as its `</msg>` arrived.

    Call `await feed(chunk)` for every chunk and `await close()` at the end. Tag handlers run when their message
    is complete, in order; `event` is what `current_event()` returns inside them, and `on_error(tag, exc)` is
    awaited for every handler that raised (the occurrence then degrades to its text; without `on_error` the
    failure is logged). The tag set is read once, when the parser is created.
    """

    def __init__(self, tag_set: TagSet | None, event: Any = None, on_error: OnTagError | None = None) -> None:
        self._tags: dict[str, BaseTag] = {t.name.lower(): t for t in (tag_set or ())}
        self._names = tuple(sorted({*self._tags, *_STRUCTURAL}))
        # every name the regex knows (lower-cased) to its tag's op with neither value nor attributes (ops are
        # tuples, never mutated, so one is shared), None for msg, think and reasoning
        self._kinds: dict[str, _TagOp | None] = {
            name: (tag, "", _NO_ATTRIBUTES) if (tag := self._tags.get(name)) is not None else None
            for name in self._names
        }
        self._roots = frozenset(name for name, tag in self._tags.items() if tag.root)
        self._token = _token_re(self._names)
        self._event = event
        self._on_error = on_error
        # scanner state
        self._buf = ""
        self._pos = 0  # first character of `_buf` not consumed yet
        self._pending: list[str] = []  # chunks received while waiting (see `_WAIT_*`)
        self._wait: re.Pattern[str] | None = None
        self._tail = ""  # the last characters before the pending chunks, for waits that span chunks
        self._missing: set[str] = set()  # end marks known to be absent from the rest of `_buf`
        self._hidden: str | None = None  # inside <think> / <reasoning>
        self._closed = False
        self._failed = False
        self._high_surrogate = ""  # the last chunk ended in the first half of a surrogate pair: held back
        # message state
        self._in_msg = False
        self._ops: list[_Op] = []
        self._bare: list[str] = []
        # the open tag's op as it stands while it holds no text: its value is the one given as an attribute
        # (`<at value="1"/>`), or ""
        self._open: _TagOp | None = None
        self._open_value: list[str] = []  # the text collected since it opened
        self._open_alone = False  # a root tag standing outside <msg>: its elements are a message of their own
        self._done: list[list[_Op]] = []
        # what follows a start tag's name, parsed: models repeat the same attributes (ids) a lot
        self._attr_cache: dict[str, tuple[dict[str, str], str, bool]] = {}

    async def feed(self, chunk: str) -> list[MessageChain]:
        """Add the next chunk of output; returns the messages completed by it (often none)."""
        if self._closed:
            raise RuntimeError("StreamParser.feed() called after close()")
        if chunk and (self._high_surrogate or not chunk.isascii()):  # `isascii()` costs nothing on ASCII text
            chunk = self._whole_chunk(chunk)
        if chunk and self._receive(chunk) and not self._failed:
            self._safely(self._scan, False)
        return await self._build() if self._done else []

    async def close(self) -> list[MessageChain]:
        """End of output: returns every message not returned yet (an unclosed `<msg>` is complete now)."""
        if self._closed:
            return []
        self._closed = True
        self._join("\ufffd" if self._high_surrogate else "")  # the pair's second half never came
        if self._failed:
            rest = self._buf[self._pos :]
            if rest.strip():
                self._done.append([rest.strip()])
        else:
            self._safely(self._scan, True)
            self._safely(self._end_message)
        return await self._build()

    # -- scanning --------------------------------------------------------------------------------------------------

    def _whole_chunk(self, chunk: str) -> str:
        """`chunk` as whole characters: a surrogate pair split across chunks is joined, a lone one replaced."""
        chunk = self._high_surrogate + chunk
        self._high_surrogate = ""
        if chunk and "\ud800" <= chunk[-1] <= "\udbff":  # a pair's first half: its second may come next
            chunk, self._high_surrogate = chunk[:-1], chunk[-1]
        return valid_text(chunk)

    def _receive(self, chunk: str) -> bool:
        """Take a chunk in; False while it cannot finish the construct being waited for."""
        if self._wait is not None:
            probe = self._tail + chunk
            if self._wait.search(probe) is None:
                self._pending.append(chunk)
                self._tail = probe[-2:]
                return False
        self._join(chunk)
        return True

    def _join(self, chunk: str) -> None:
        self._buf = "".join((self._buf[self._pos :], *self._pending, chunk))
        self._pos = 0
        self._pending.clear()
        self._wait = None
        if self._missing:
            self._missing.clear()
            self._token = _token_re(self._names)

    def _stop(self, pos: int, wait: re.Pattern[str] | None) -> None:
        self._pos = pos
        self._wait = wait
        self._tail = self._buf[-2:]

    def _scan(self, final: bool) -> None:
        """Consume `_buf` from `_pos`. Without `final`, stop before anything more data could change."""
        buf = self._buf
        n = len(buf)
        pos = at = self._pos  # `pos`: start of the text not taken yet; `at`: where to look for markup
        kinds = self._kinds
        attr_cache = self._attr_cache
        roots = self._roots
        while True:
            if self._hidden is not None:  # everything up to </think> is dropped
                m = _hidden_end_re(self._hidden, self._in_msg).search(buf, pos)
                if m is not None:
                    pos = at = m.end()
                    self._hidden = None
                    if m.group(0)[2:5].lower() == "msg":  # an unclosed <think> ends with its message
                        self._structural("/", "msg", "")
                    continue
                if final:
                    return self._stop(n, None)
                lt = buf.rfind("<", pos)
                ends = lt >= 0 and _may_end_hidden(buf[lt:], self._hidden, self._in_msg)
                return self._stop(lt if ends else n, None)
            # The tags from `at` on, until one makes the scan jump (a hidden block opens; a comment, CDATA or
            # declaration, handled below) or the markup ends: one `finditer` costs less per tag than a search each.
            name = None
            for m in self._token.finditer(buf, at):
                start, stop = m.span()
                if start > pos:  # the text before the markup (a `<` that starts no markup is text)
                    text = buf[pos:start]
                    # (layout whitespace between messages, which `_text` would drop, is dropped without the calls)
                    if self._ops or self._bare or self._open is not None or not text.isspace():
                        self._text(decode_references(text))
                boundary, slash, name, quoted_rest, rest, content = m.groups()
                if name is None:
                    if boundary is None:
                        break
                    slash, name, quoted_rest = "/", "msg", ""  # `</msg>`, and then `<msg>` opens the next (below)
                if quoted_rest is not None:
                    rest = quoted_rest
                elif not final and "<" not in buf[stop:] and _quote_open(rest):
                    # The tag ended at a `>` inside an open quote: more data may still close the quote (and then
                    # the tag ends later), so wait, exactly as for an unfinished tag. The text before it is taken.
                    return self._stop(start, _WAIT_TAG)
                pos = at = stop
                try:
                    empty = kinds[name]
                except KeyError:  # the regex matched the name in another letter case
                    name = name.lower()
                    empty = kinds[name]
                if empty is None:  # msg, think, reasoning
                    if name == "msg" and not rest:  # `_structural` of the usual `<msg>` and `</msg>`, inlined
                        if self._bare or self._open is not None:
                            self._end_message()
                        elif ops := self._ops:  # `_end_message` with nothing open or pending, inlined
                            self._ops = []
                            if type(first := ops[0]) is str:
                                ops[0] = first.lstrip()
                            if type(last := ops[-1]) is str:
                                ops[-1] = last.rstrip()
                            self._done.append(ops)
                        # after a boundary, `<msg>` follows: with nothing left open or pending, it only opens a message
                        self._in_msg = not slash or boundary is not None
                    else:
                        self._structural(slash, name, rest)
                elif slash:
                    if self._open is not None:  # any known end tag closes the open tag; a stray one is dropped
                        self._close_tag()
                elif self._open_alone or self._open_value or self._bare or (not self._in_msg and name in roots):
                    self._start(empty, rest)
                else:  # `_start` after a tag that holds no text (the usual case), inlined with its `_close_tag`
                    if (op := self._open) is not None:
                        self._ops.append(op)
                        self._open = None
                    alone = False
                    if rest:
                        cached = attr_cache.get(rest)
                        if cached is None:
                            cached = attr_cache[rest] = _start_tag_rest(rest)
                        attrs, default, alone = cached
                        op = (empty[0], default, attrs)
                    else:
                        op = empty
                    if alone:  # <at id="1"/>
                        self._ops.append(op)
                    elif content is None:
                        self._open = op
                        continue
                    else:  # <text>hi</text>: opened and closed at once
                        if content:
                            if "&" in content:
                                content = decode_references(content)
                            op = (op[0], content, op[2])
                        self._ops.append(op)
                        continue
                if content is not None:
                    if content and "&" in content:
                        content = decode_references(content)
                    if self._hidden is not None:  # <think>...</think>: dropped, end tag included
                        self._hidden = None
                    elif empty is None:
                        if content:
                            self._text(content)
                        self._structural("/", name, "")
                    elif self._open is not None:  # <text>hi</text>, the usual case: the tag is still open
                        self._close_tag(content)
                    else:  # <at/>hi</at>: the text is outside the (self-closed) tag
                        if content:
                            self._text(content)
                        if self._open is not None:
                            self._close_tag()
                elif self._hidden is not None:
                    break
            else:  # no more markup: the rest is text, but for what more data could still make markup
                end = n
                wait = None
                if not final:
                    lt = buf.rfind("<", at)
                    if lt >= 0 and _may_grow(buf[lt:]):
                        end, wait = lt, _WAIT_TAG
                    else:  # keep back a character reference that may be cut in two
                        amp = buf.find("&", max(pos, n - _REF_MAX))
                        if amp >= 0:
                            end = amp
                if end > pos:
                    self._text(decode_references(buf[pos:end]))
                return self._stop(end, wait)
            if name is not None:  # a hidden block opened: dropped up to its end, above
                continue
            opener = m.group(0)
            if opener == "<!--":
                end_mark, wait, keep = _COMMENT
            elif opener[-1] == "[":
                end_mark, wait, keep = _CDATA if opener[2] == "[" else _DOCTYPE
            else:  # a declaration (<!ENTITY ...>) or processing instruction: dropped, never expanded
                pos = at = stop
                continue
            close = -1 if end_mark in self._missing else buf.find(end_mark, stop)
            if close < 0:
                if not final:
                    return self._stop(start, wait)
                self._missing.add(end_mark)  # unclosed at the end: the `<` is text, and so is what follows
                self._token = _token_re(self._names, frozenset(self._missing))
                pos, at = start, start + 1
                continue
            if keep and close > stop:
                self._text(buf[stop:close])
            pos = at = close + len(end_mark)

    # -- assembling messages ---------------------------------------------------------------------------------------

    def _text(self, text: str) -> None:
        if self._open is not None:
            self._open_value.append(text)
        elif self._bare or self._ops or not text.isspace():  # else: layout whitespace at a message's start
            self._bare.append(text)

    def _structural(self, slash: str, name: str, rest: str) -> None:
        """`<msg>`, `</msg>` and `<think>`/`<reasoning>` (their end tags outside a hidden block are dropped)."""
        if name == "msg":
            if slash or self._ops or self._bare or self._open is not None:
                self._end_message()
            self._in_msg = not slash and not rest.rstrip().endswith("/")
        elif not slash and not rest.rstrip().endswith("/"):
            self._hidden = name

    def _start(self, empty: _TagOp, rest: str) -> None:
        """A start tag of the tag set (`empty`: its op without value or attributes): ends an open tag, then opens
        this one (and closes it if self-closing)."""
        tag = empty[0]
        if tag.root and not self._in_msg:
            self._end_message()  # closes the open tag too
            self._open_alone = True
        else:
            # A tag opened inside another ends it: <text>a<at id=1/>b</text> is text, at, text.
            if (op := self._open) is not None:
                if self._open_value or self._open_alone:
                    self._close_tag()
                else:  # `_close_tag()` of a tag that holds no text, inlined (`_open` is set below)
                    self._ops.append(op)
            if self._bare:
                self._flush_bare()
        if rest:
            cached = self._attr_cache.get(rest)
            if cached is None:
                cached = self._attr_cache[rest] = _start_tag_rest(rest)
            attrs, default, alone = cached
            self._open = (tag, default, attrs)
            if alone:
                self._close_tag()
        else:
            self._open = empty

    def _close_tag(self, content: str = "") -> None:
        """Close the open tag (callers check there is one); its value is the text collected since it opened,
        followed by `content`."""
        op = self._open
        assert op is not None  # for the type checker: every caller checked
        if self._open_value:
            content = "".join(self._open_value) + content
            self._open_value.clear()
        if content:
            op = (op[0], content, op[2])
        self._open = None
        if self._open_alone:
            self._open_alone = False
            self._done.append([op])
        else:
            self._ops.append(op)

    def _flush_bare(self) -> None:
        if self._bare:
            text = "".join(self._bare)
            self._bare.clear()
            if text and not text.isspace():
                self._ops.append(text)

    def _end_message(self) -> None:
        if self._open is not None:
            self._close_tag()
        if self._bare:
            self._flush_bare()
        ops = self._ops
        if ops:
            self._ops = []
            if type(first := ops[0]) is str:  # layout whitespace where bare text meets the message's edges
                ops[0] = first.lstrip()
            if type(last := ops[-1]) is str:
                ops[-1] = last.rstrip()
            self._done.append(ops)

    def _safely(self, step: Callable[..., None], *args: Any) -> None:
        """Run a scanner step; a bug in it must not lose the reply, so the rest of the output becomes plain text."""
        try:
            step(*args)
        except Exception:
            _log.exception("output parser failed; the rest of the output is sent as plain text")
            self._failed = True
            self._open = None
            try:
                self._end_message()
            except Exception:
                self._ops = []

    # -- running tag handlers --------------------------------------------------------------------------------------

    async def _build(self) -> list[MessageChain]:
        """Run the tag handlers of the completed messages, in order, and return their chains (empty ones dropped)."""
        done, self._done = self._done, []
        chains: list[MessageChain] = []
        token = _current_event.set(self._event)
        # Every handler runs under its tag's deadline (a hung one would hold its session and a turn slot for
        # ever), without a timer or a clock read per tag: one `_Deadline` per call, told which handler runs.
        deadline = _Deadline()
        new_chain = MessageChain.__new__
        tag: BaseTag
        value: str
        attrs: dict[str, str]
        try:
            for ops in done:
                # `__new__` alone: an empty chain (its `__init__` only fills it), without a Python call per message
                chain = new_chain(MessageChain)
                append = chain.append
                for op in ops:
                    # `type(x) is` rather than `x.__class__ is`: as fast (3.11 specialises the call), and the
                    # type checker narrows on it; `isinstance` would narrow the tag op below too, but costs more
                    if type(op) is str:
                        append(Text(op))
                        continue
                    tag, value, attrs = op  # pyright: ignore[reportAssignmentType] - a tag op: str is not final, so `type(op) is str` leaves the union as is
                    deadline.handler += 1  # the deadline's start, inlined: this loop is the hot path
                    deadline.limit = limit = tag.timeout
                    if deadline.timer is None and limit is not None:
                        deadline.arm(limit)
                    try:
                        # `**attrs` of an empty dict passes nothing, but costs a slower call on the hot path
                        elements = await (tag.handle(value, **attrs) if attrs else tag.handle(value))
                        if deadline.fired:
                            deadline.finish()
                        if elements.__class__ is list and len(elements) == 1:  # the usual result: one element
                            element = elements[0]
                            if type(element) is Text:
                                if element.text:  # an empty Text is dropped
                                    append(element)
                            elif isinstance(element, BaseMessageElement) and not isinstance(element, Text):
                                append(element)
                            else:  # a Text subclass, or not an element at all
                                _add_elements(chain, elements, tag)
                        else:
                            _add_elements(chain, elements, tag)
                    except BaseException as caught:  # a handler's SystemExit or KeyboardInterrupt is its failure
                        deadline.limit = None  # no handler runs while the failure is reported
                        exc = caught
                        if isinstance(caught, asyncio.CancelledError) and deadline.absorb():
                            exc = TagTimeout(f"tag <{tag.name}> did not finish within {tag.timeout:g} s")
                        elif must_propagate(caught):  # a cancellation from outside, a real Ctrl-C
                            raise
                        await self._report(tag, exc)
                        if value and not value.isspace():
                            append(Text(value))
                if chain:
                    chains.append(chain)
        finally:
            deadline.close()
            _current_event.reset(token)
        return chains

    async def _report(self, tag: BaseTag, exc: BaseException) -> None:
        """Tell `on_error` about a failed handler; without one (or when it fails too), log the failure."""
        if self._on_error is not None:
            try:
                await self._on_error(tag, exc)
                return
            except Exception:
                _log.exception("on_error callback failed for tag <%s>", tag.name)
        _log.warning(
            "tag <%s> (plugin %s) failed: %r; its text is sent instead", tag.name, tag.owner, exc, exc_info=exc
        )


class _Deadline:
    """The deadline of the tag handler running now, in the task that runs it, at no cost per handler: the caller
    numbers each handler (`handler += 1`) and sets its `limit` (None while no handler runs: the caller awaits nothing
    else between handlers, and `close()` ends the watch). One timer, armed at the first handler with a limit, looks
    every quarter of that limit at which handler runs and cancels it once it has seen the same one running for its
    whole limit: never early, late by at most a quarter. `absorb()` tells that cancellation from one coming from
    outside (which propagates)."""

    __slots__ = ("_loop", "_task", "timer", "handler", "limit", "fired", "_seen", "_seen_at")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self.timer: asyncio.TimerHandle | None = None
        self.handler = 0  # the number of the handler running (or last run)
        self.limit: float | None = None
        self.fired = False
        self._seen = -1  # the handler the timer saw running, and since when
        self._seen_at = 0.0

    def arm(self, limit: float) -> None:
        """Start watching (the caller set `limit`)."""
        self._seen, self._seen_at = self.handler, self._loop.time()
        self.timer = self._loop.call_later(limit / 4, self._check)

    def _check(self) -> None:
        self.timer = None
        if self.limit is None:
            return  # no handler runs, or one without a limit: the next one with a limit arms again
        now = self._loop.time()
        if self.handler != self._seen:
            self._seen, self._seen_at = self.handler, now  # another handler: its time starts now at the latest
        elif now - self._seen_at >= self.limit and self._task is not None:
            self.fired = True
            self.limit = None
            self._task.cancel()
            return
        self.timer = self._loop.call_later(self.limit / 4, self._check)

    def finish(self) -> None:
        """The handler returned although this deadline fired: it swallowed the cancellation, so undo the request."""
        self.fired = False
        if self._task is not None:
            self._task.uncancel()

    def absorb(self) -> bool:
        """After a `CancelledError`: True when it was this deadline's (now undone), False when it came from outside."""
        fired, self.fired = self.fired, False
        return fired and self._task is not None and self._task.uncancel() == 0

    def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


async def parse_output(
    text: str, tag_set: TagSet | None, event: Any = None, *, on_error: OnTagError | None = None
) -> list[MessageChain]:
    """Parse a complete model output into one `MessageChain` per outgoing message. Never raises.

    The same as feeding `text` to a `StreamParser` in any chunks and closing it.
    """
    parser = StreamParser(tag_set, event, on_error)
    chains: list[MessageChain] = []
    for start in range(0, len(text or ""), _SLICE):  # in slices: fewer objects alive at once, less GC work
        chains += await parser.feed(text[start : start + _SLICE])
    return chains + await parser.close()


async def parse_stream(
    chunks: AsyncIterable[str], tag_set: TagSet | None, event: Any = None, on_error: OnTagError | None = None
) -> AsyncIterator[MessageChain]:
    """Yield each message of a streamed output as soon as it is complete (its `</msg>` arrived)."""
    parser = StreamParser(tag_set, event, on_error)
    async for chunk in chunks:
        for chain in await parser.feed(chunk):
            yield chain
    for chain in await parser.close():
        yield chain
