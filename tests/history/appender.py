"""Appends turns from 8 concurrent tasks as fast as it can and prints each turn id after `append_turn` returned.

Run by the kill -9 test: `python tests/history/appender.py DB_PATH`.
"""

import asyncio
import sys

from core.history import HistoryStore
from core.provider.llm import ChatMessage


async def main(path: str) -> None:
    async with HistoryStore(path) as store:

        async def writer(n: int) -> None:
            i = 0
            while True:
                i += 1
                turn = [ChatMessage("user", f"question {i}"), ChatMessage("assistant", f"answer {i}")]
                turn_id = await store.append_turn(f"test:dm:{n}", turn)
                sys.stdout.write(f"{turn_id}\n")
                sys.stdout.flush()

        await asyncio.gather(*(writer(n) for n in range(8)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
