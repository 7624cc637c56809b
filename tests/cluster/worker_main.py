"""A cluster worker process for the scale-out tests: `python worker_main.py CONFIG NAME [--hang | --slow | --stuck]`.

It runs `core.cluster.Worker` on the testing kit's `EchoProvider` (so each reply names the messages it answered)
and prints `ready` once it consumes. With `--hang`, a plugin's `im_message` hook never returns (a hung plugin);
with `--slow`, it takes half a second per message (so a test can kill the worker while it holds messages); with
`--stuck`, a turn never ends once its reply is sent (so a test can kill the worker between send and store)."""

import asyncio
import logging
import sys

from core.cluster import Worker
from core.config import load_config
from core.plugin import BasePlugin, on
from core.testing import EchoProvider
from core.utils.heap import freeze_started


class Hang(BasePlugin):
    """Never lets a message through."""

    @on.im_message()
    async def hang(self, event, *args, **kwargs):
        await asyncio.Event().wait()


class Slow(BasePlugin):
    """Takes half a second over every message."""

    @on.im_message()
    async def dawdle(self, event, *args, **kwargs):
        await asyncio.sleep(0.5)


class Stuck(BasePlugin):
    """Never lets a turn end once it sent its reply: the turn is not stored."""

    @on.message_sent()
    async def stick(self, event, *args, **kwargs):
        await asyncio.Event().wait()


async def main(config_path: str, name: str, hang: bool, slow: bool, stuck: bool) -> None:
    plugins = ([Hang] if hang else []) + ([Slow] if slow else []) + ([Stuck] if stuck else [])
    worker = Worker(load_config(config_path), provider=EchoProvider(), name=name, entry_points=False, plugins=plugins)
    async with worker:
        freeze_started()  # as `hookchat run --role worker` does once started
        print("ready", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(main(sys.argv[1], sys.argv[2], "--hang" in sys.argv, "--slow" in sys.argv, "--stuck" in sys.argv))
