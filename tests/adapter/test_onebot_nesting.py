"""A OneBot frame nested deeper than any real event (an implementation's bug, or a peer that wants the adapter down)
is a malformed frame: skipped with a warning, the connection stays up and the next event is answered."""

from __future__ import annotations

import json
import logging

import anyio
import pytest
from websockets.asyncio.client import connect

from core.chat import MessageChain
from core.chat.message_elements import Text
from core.testing import ScriptedProvider
from tests.adapter.conftest import recorder, running_bot
from tests.adapter.napcat import BOT_ID, FRIEND_ID, implementation_headers
from tests.adapter.test_onebot_reverse import TOKEN, private_event, reverse_adapter, url_of

pytestmark = pytest.mark.anyio


def nested_event(depth: int) -> str:
    """A message event whose text segment carries `depth` nested arrays in an extra field."""
    event = json.dumps(private_event(FRIEND_ID, "deep", message_id=7))
    return event.replace('"text": "deep"}', '"text": "deep", "x": ' + "[" * depth + "]" * depth + "}")


@pytest.mark.parametrize("depth", [100, 900, 5_000, 200_000])  # past about 900 json.loads itself recurses too deep
async def test_a_deeply_nested_frame_is_skipped_and_the_connection_stays_up(caplog, depth):
    adapter = reverse_adapter()
    Recorder, inbox = recorder()
    async with running_bot(adapter, ScriptedProvider(["fine"]), plugins=[Recorder]):
        with anyio.fail_after(20), caplog.at_level(logging.WARNING, "hookchat.adapter.onebot"):
            async with connect(
                url_of(adapter), additional_headers=implementation_headers(BOT_ID, TOKEN), proxy=None, max_size=None
            ) as ws:
                await ws.send(nested_event(depth))
                await ws.send(json.dumps(private_event(FRIEND_ID, "the next one", message_id=8)))
                event = await inbox.get()
                assert ws.close_code is None, "the connection stays up"
    assert event.message.chain == MessageChain([Text("the next one")])
    assert adapter.stats().malformed_frames == 1
    assert "nested" in caplog.text
