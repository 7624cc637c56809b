"""A worker's sweep for stranded parked messages: a begun batch is redone whole or not at all (a part of it would be
another batch, whose replies carry other ids than those the batch may have sent), and loose messages are flushed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core.chat import (
    KiraIMMessage,
    KiraMessageBatchEvent,
    KiraMessageEvent,
    MessageChain,
    Session,
    SessionBuffers,
    TurnResult,
    User,
)
from core.chat.message_elements import Text
from core.chat.wire import message_to_wire
from core.cluster._held import HeldMessages
from core.cluster._recovery import Recovery
from core.utils.tasks import TaskOwner

pytestmark = [pytest.mark.anyio]

SID = "test:dm:u1"


def wire(text: str) -> dict[str, Any]:
    message = KiraIMMessage(MessageChain([Text(text)]), User("u1"), Session("test", "dm", "u1"))
    KiraMessageEvent(message)  # derives the session, as a gateway's receive does
    return {"gw": "gw", "message": message_to_wire(message)}


class ParkedHistory:
    """What `Recovery` reads of a `ClusterHistory`: one session's parked messages and begun batches."""

    def __init__(self, turns: list[list[str]], messages: dict[str, dict[str, Any]]) -> None:
        self.left = (turns, messages)

    async def parked(self, partition: int):
        return {SID: self.left}

    async def unpark(self, sid: str, ids) -> None:
        pass


class Turns:
    """The app's side: buffers, a scheduler with nothing running, and the batches it was given."""

    def __init__(self) -> None:
        self.buffers = SessionBuffers()
        self.scheduler = self
        self.batches: list[list[str | None]] = []

    def is_busy(self, sid: str) -> bool:
        return False

    def _turn(self, ids: list[str | None]) -> asyncio.Future[TurnResult]:
        self.batches.append(ids)
        return asyncio.get_running_loop().create_future()

    def flush(self, session: str) -> asyncio.Future[TurnResult] | None:
        events = self.buffers.drain(session)
        return self._turn([e.inbox_id for e in events]) if events else None

    def submit(self, batch: KiraMessageBatchEvent) -> asyncio.Future[TurnResult]:
        return self._turn([m.inbox_id for m in batch.messages])


class HeldMsg:
    subject = "hookchat.in.0"


async def sweep_twice(history: ParkedHistory, held: HeldMessages) -> Turns:
    app = Turns()
    tasks = TaskOwner("test")
    recovery = Recovery(app, history, held, lambda *_: None, tasks, "w")  # type: ignore[arg-type] - fakes
    for _ in range(2):  # a message is stranded once two sweeps in a row saw it
        await recovery.sweep([0], lambda p: True)
    await tasks.aclose()
    return app


async def test_a_begun_batch_one_of_whose_messages_is_held_is_not_redone_in_part():
    history = ParkedHistory([["a", "b"]], {"a": wire("a"), "b": wire("b")})
    held = HeldMessages(30.0, lambda subject: 0)
    held.hold("b", HeldMsg())  # type: ignore[arg-type] - only its subject is read
    app = await sweep_twice(history, held)
    assert app.batches == []  # not ["a"]: b's delivery redoes the batch whole


async def test_a_stranded_begun_batch_is_redone_whole_and_loose_messages_flushed_after_it():
    history = ParkedHistory([["a", "b"]], {"a": wire("a"), "b": wire("b"), "c": wire("c")})
    app = await sweep_twice(history, HeldMessages(30.0, lambda subject: 0))
    assert app.batches == [["a", "b"], ["c"]]
