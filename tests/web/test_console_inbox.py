"""The console and the durable inbox: Stop and Clear mean done (the messages leave the inbox, so a restart does
not answer them again), and `/api/inbox` lists the messages set aside as poison."""

from __future__ import annotations

import asyncio
import json
import time

from core.chat import KiraIMMessage, MessageChain, User
from core.chat.message_elements import Text
from tests.web.test_console_api import _blocking_model, _set, connect_chat, frames_until


async def _inbox_texts(live) -> list[str]:
    return [data["text"] for _, _, _, data in await live.app.history.unfinished()]


def test_stop_removes_the_stopped_message_from_the_inbox(live_console):
    gate = live_console.call(_blocking_model(live_console))
    with connect_chat(live_console, "?session=stop1") as ws:
        ws.recv(timeout=10)
        ws.send(json.dumps({"type": "message", "text": "take your time"}))
        live_console.call(gate["entered"].wait())
        assert live_console.call(_inbox_texts(live_console)) == ["take your time"]
        ws.send(json.dumps({"type": "stop"}))
        ended = frames_until(ws, "turn_ended")
        live_console.call(_set(gate["release"]))
    assert ended[-1]["stopped"] is True
    assert live_console.call(_inbox_texts(live_console)) == []


def test_clear_drops_the_messages_waiting_for_an_answer_and_their_inbox_rows(live_console):
    gate = live_console.call(_blocking_model(live_console))
    app = live_console.app
    session = live_console.console.chat.session("clear1")

    async def busy():
        turns = []
        for text in ("first", "second", "third"):
            await app.receive(KiraIMMessage(MessageChain([Text(text)]), User("me", "me"), session))
            turns.append(app.flush(session))
            if text == "first":
                await gate["entered"].wait()
        return turns

    turns = live_console.call(busy())
    assert app.scheduler.waiting(session.sid) == 2
    with live_console.client() as client:
        removed = client.delete(f"/api/sessions/{session.sid}").json()
    assert removed == {"ok": True, "removed": 0}
    assert live_console.call(_inbox_texts(live_console)) == ["first"], "only the running turn's message is left"
    live_console.call(_set(gate["release"]))
    live_console.call(asyncio.wait([turns[0]]))
    assert all(t.cancelled() for t in turns[1:])
    assert live_console.call(_inbox_texts(live_console)) == []


def test_the_inbox_endpoint_lists_messages_set_aside_as_poison(live_console):
    record = {
        "text": "the bad one",
        "user_id": "u",
        "nickname": "",
        "adapter": "web",
        "type": "dm",
        "id": "p1",
        "group_id": None,
        "message_id": "",
        "is_mentioned": True,
    }

    async def set_aside():
        inbox = live_console.app.inbox
        inbox_id = inbox.record_received("web:dm:p1", record, time.time())
        await inbox.start_attempt([inbox_id])
        await inbox.set_aside([inbox_id])
        return inbox_id

    inbox_id = live_console.call(set_aside())
    with live_console.client() as client:
        listed = client.get("/api/inbox").json()
    assert listed["waiting"] == 0
    assert [(p["id"], p["sid"], p["text"], p["attempts"]) for p in listed["poison"]] == [
        (inbox_id, "web:dm:p1", "the bad one", 1)
    ]
