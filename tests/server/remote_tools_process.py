"""A second process for the registry tests: offers the tool `shout` through `ToolRegistryClient`, prints
REGISTERED (or STARTED when the registry did not answer yet) and runs until terminated."""

import asyncio
import os
import sys

from core.server.client import ToolRegistryClient


async def main(registry_url: str) -> None:
    client = ToolRegistryClient(
        registry_url,
        source="proc-tools",
        token=os.environ["HOOKCHAT_TEST_TOKEN"],
        probe_interval=0.2,
        request_timeout=2.0,
    )

    @client.tool(
        "shout",
        "Upper-case a text",
        {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    )
    async def shout(*, text: str) -> dict:
        return {"shouted": text.upper(), "pid": os.getpid()}

    await client.start()
    registered = await client.wait_registered(10)
    print("REGISTERED" if registered else "STARTED", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    try:
        asyncio.run(main(sys.argv[1]))
    except KeyboardInterrupt:
        pass
