"""Proactive messages: receipts that say honestly whether the local submission path accepted the message
(`backpressure`, `transport_unavailable`, `transport_error` otherwise), and what delivery does."""

import gc
import weakref

import anyio
import pytest

from core.chat.message_elements import Image
from core.chat.message_utils import KiraIMSentResult, MessageChain
from core.plugin import BasePlugin, on
from core.services import PushMessageError
from core.testing import ChatHarness, RecordingAdapter, ScriptedProvider
from core.utils.signals import message_sent

pytestmark = pytest.mark.anyio

TEXT = [{"type": "text", "text": "Task complete"}]


class FlakyAdapter(RecordingAdapter):
    """Records like the test adapter; refuses every message while `failing`, raises while `raising`."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False
        self.raising = False

    async def send(self, session, chain):
        if self.raising:
            raise ConnectionError("platform down, secret=hunter2")
        if self.failing:
            return KiraIMSentResult(MessageChain(chain), session, ok=False, error="refused")
        return await super().send(session, chain)


class Notifier(BasePlugin):
    def notify(self, **overrides):
        fields = {"source": "my_feature", "visibility": ["chat"], "ai_behavior": "blind", "parts": TEXT, "priority": 5}
        fields.update(overrides)
        return self.push_message(**fields)


def harness(**kw):
    return ChatHarness(plugins=[Notifier], **kw)


async def test_a_submitted_message_is_delivered_to_the_only_session_by_default():
    async with harness(provider=ScriptedProvider(["hello"])) as bot:
        await bot.send("hi")  # the bot answered this session: it is the default target now
        receipt = bot.plugin("notifier").notify()
        assert receipt == {"submitted": True, "ok": True, "id": receipt["id"], "session": "test:dm:user"}
        await bot.app.push.join()
        assert bot.app.push.outcome(receipt["id"]) == "delivered"
        assert bot.sent[-1].plain_text == "Task complete"


async def test_a_session_may_be_named_and_images_are_sent_as_images():
    async with harness() as bot:
        parts = [{"type": "text", "text": "look"}, {"type": "image", "data": b"\x89PNG...", "mime": "image/png"}]
        receipt = bot.plugin("notifier").notify(session="test:gm:42", parts=parts)
        assert receipt["submitted"] and receipt["session"] == "test:gm:42"
        await bot.app.push.join()
        [sent] = bot.adapter.sent
    assert sent.session.sid == "test:gm:42"
    assert isinstance(sent.chain[1], Image) and sent.chain[1].mime == "image/png"


async def test_a_full_queue_answers_backpressure():
    async with harness() as bot:
        bot.app.push.capacity = 2
        notifier = bot.plugin("notifier")
        receipts = [notifier.notify(session="test:dm:u") for _ in range(3)]  # nothing is delivered in between
        assert [r["submitted"] for r in receipts] == [True, True, False]
        assert receipts[2] == {"submitted": False, "ok": False, "reason": "backpressure"}
        await bot.app.push.join()
        assert notifier.notify(session="test:dm:u")["submitted"] is True, "room again once delivered"


async def test_no_target_or_no_adapter_or_no_running_app_is_transport_unavailable():
    unavailable = {"submitted": False, "ok": False, "reason": "transport_unavailable"}
    async with harness() as bot:
        notifier = bot.plugin("notifier")
        assert notifier.notify() == unavailable, "no session yet and none named"
        assert notifier.notify(session="nowhere:dm:1") == unavailable, "no adapter serves it"
        push, bot.app.push = bot.app.push, None
        assert notifier.notify(session="test:dm:1") == unavailable, "the app has no push service"
        bot.app.push = push
    assert notifier.notify(session="test:dm:1") == unavailable, "the app stopped"


async def test_once_the_bot_talked_to_two_sessions_a_session_must_be_named(caplog):
    async with harness(provider=ScriptedProvider(["hello ann", "hello bob"])) as bot:
        await bot.send("hi", user_id="ann")
        await bot.send("hi", user_id="bob")
        notifier = bot.plugin("notifier")
        unnamed = [notifier.notify(), notifier.notify()]
        named = notifier.notify(session="test:dm:ann")
        await bot.app.push.join()
    assert unnamed == [{"submitted": False, "ok": False, "reason": "transport_unavailable"}] * 2, (
        "ann's notification must not reach bob"
    )
    assert named["submitted"] is True and bot.sent[-1].plain_text == "Task complete"
    assert [r.getMessage() for r in caplog.records].count(
        "push_message of plugin 'notifier' refused: the bot talks to several sessions, so name one with session="
    ) == 1


@pytest.mark.parametrize("visibility, ai_behavior", [(["hud"], "blind"), ([], "blind")])
async def test_a_message_nothing_can_carry_is_transport_unavailable(visibility, ai_behavior):
    async with harness() as bot:
        receipt = bot.plugin("notifier").notify(session="test:dm:u", visibility=visibility, ai_behavior=ai_behavior)
        assert receipt == {"submitted": False, "ok": False, "reason": "transport_unavailable"}
        assert bot.app.push.queued == 0


async def test_read_without_chat_needs_a_history_to_go_to():
    async with harness(history=False) as bot:
        notifier = bot.plugin("notifier")
        unread = notifier.notify(session="test:dm:u", visibility=["hud"], ai_behavior="read")
        shown = notifier.notify(session="test:dm:u", visibility=["chat"], ai_behavior="read")
        await bot.app.push.join()
    assert unread == {"submitted": False, "ok": False, "reason": "transport_unavailable"}
    assert shown["submitted"] is True and bot.sent[-1].plain_text == "Task complete"


async def test_a_failing_adapter_makes_later_receipts_transport_error_until_it_works_again():
    adapter = FlakyAdapter()
    async with harness(adapter=adapter, provider=ScriptedProvider(["back"])) as bot:
        notifier = bot.plugin("notifier")
        adapter.raising = True
        first = notifier.notify(session="test:dm:user")
        assert first["submitted"] is True, "submission is local: the failure comes later"
        await bot.app.push.join()
        assert bot.app.push.outcome(first["id"]) == "transport_error"
        second = notifier.notify(session="test:dm:user")
        assert second == {"submitted": False, "ok": False, "reason": "transport_error"}
        assert "hunter2" not in repr(second), "never the raw exception text"
        adapter.raising = False
        await bot.send("ping")  # a message sent through the adapter successfully clears the failure
        assert notifier.notify(session="test:dm:user")["submitted"] is True


async def test_a_refused_message_counts_as_a_transport_error_too():
    adapter = FlakyAdapter()
    adapter.failing = True
    async with harness(adapter=adapter) as bot:
        receipt = bot.plugin("notifier").notify(session="test:dm:user")
        await bot.app.push.join()
        assert bot.app.push.outcome(receipt["id"]) == "transport_error"
        assert bot.plugin("notifier").notify(session="test:dm:user")["reason"] == "transport_error"


async def test_higher_priority_messages_are_delivered_first():
    async with harness() as bot:
        notifier = bot.plugin("notifier")
        notifier.notify(session="test:dm:u", parts=[{"type": "text", "text": "low"}], priority=1)
        notifier.notify(session="test:dm:u", parts=[{"type": "text", "text": "urgent"}], priority=9)
        await bot.app.push.join()
    assert [c.plain_text for c in bot.sent] == ["urgent", "low"]


async def test_read_goes_to_history_and_respond_runs_a_turn():
    provider = ScriptedProvider(["Your task is done!"])
    async with harness(provider=provider) as bot:
        notifier = bot.plugin("notifier")
        notifier.notify(
            session="test:dm:ann",
            ai_behavior="read",
            visibility=[],
            parts=[{"type": "text", "text": "backup finished"}],
        )
        notifier.notify(
            session="test:dm:ann",
            ai_behavior="respond",
            visibility=["hud"],
            parts=[{"type": "text", "text": "build passed"}],
        )
        await bot.app.push.join()
        await bot.app.scheduler.join()
        history = await bot.app.history.get_history("test:dm:ann")
    assert history[0].content == "[notification from plugin notifier (my_feature)] backup finished"
    assert provider.requests[0].user_prompt == "[notification from plugin notifier (my_feature)] build passed"
    assert [c.plain_text for c in bot.sent] == ["Your task is done!"], "hud and read-only parts show nothing"


async def test_a_message_may_be_pushed_from_a_worker_thread():
    async with harness() as bot:
        notifier = bot.plugin("notifier")
        receipt = await anyio.to_thread.run_sync(lambda: notifier.notify(session="test:dm:t"))
        assert receipt["submitted"]
        await bot.app.push.join()
        assert bot.sent[-1].plain_text == "Task complete"


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"ai_behavior": "shout"}, "ai_behavior"),
        ({"visibility": ["screen"]}, "visibility"),
        ({"priority": 11}, "priority"),
        ({"parts": []}, "parts"),
        ({"parts": [{"type": "image", "url": "http://example.com/x.png"}]}, "external image URLs"),
        ({"parts": [{"type": "audio", "data": b"x"}]}, "not delivered"),
        ({"colour": "red"}, "unknown push_message field"),
        ({"source": ""}, "source"),
        ({"session": "not-a-session"}, "adapter_name:dm|gm:id"),
    ],
)
async def test_a_malformed_message_raises_and_queues_nothing(overrides, message):
    async with harness() as bot:
        with pytest.raises(PushMessageError, match=message):
            bot.plugin("notifier").notify(**{"session": "test:dm:u", **overrides})
        assert bot.app.push.queued == 0


async def test_v1_content_is_still_translated_with_a_deprecation_warning():
    async with harness() as bot:
        with pytest.warns(DeprecationWarning, match="content"):
            receipt = bot.plugin("notifier").push_message(source="old", content="legacy text", session="test:dm:v")
        await bot.app.push.join()
        assert receipt["submitted"] and bot.sent[-1].plain_text == "legacy text"


class SentWatcher(BasePlugin):
    """Records what every `message_sent` hook call saw."""

    async def initialize(self):
        self.seen = []

    @on.message_sent()
    async def saw(self, event, result, *args, **kwargs):
        self.seen.append((result.chain.message_repr, result.ok, event.push is not None))


async def test_a_pushed_message_goes_through_the_one_send_path_and_fires_message_sent_hooks():
    signalled = []

    def on_signal(_sender, chain=None, **_):
        signalled.append(chain.message_repr)

    message_sent.connect(on_signal, weak=False)
    try:
        async with ChatHarness(plugins=[Notifier, SentWatcher], provider=ScriptedProvider(["hello"])) as bot:
            await bot.send("hi")
            bot.plugin("notifier").notify(parts=[{"type": "text", "text": "pushed"}])
            await bot.app.push.join()
            seen = bot.plugin("sent_watcher").seen
    finally:
        message_sent.disconnect(on_signal)
    assert seen == [("hello", True, False), ("pushed", True, True)], "the hook sees agent and pushed sends alike"
    assert signalled == ["hello", "pushed"], "and so does the signal"


async def test_a_stopped_app_leaves_nothing_behind_in_the_message_sent_signal():
    # blinker's disconnect for one sender keeps a strong receiver in the signal: every app ever started (its
    # plugins, history, provider) would stay in memory for the life of the process.
    receivers_before = len(message_sent.receivers)
    async with ChatHarness(provider=ScriptedProvider(["hi"])) as bot:
        await bot.send("hello")
        app = weakref.ref(bot.app)
        assert len(message_sent.receivers) == receivers_before + 1
    del bot
    gc.collect()
    assert len(message_sent.receivers) == receivers_before
    assert app() is None
