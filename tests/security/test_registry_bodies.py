"""The tool registry answers 400, with a reason, for any malformed body: a lone surrogate in a name, parameters
nested 100 deep, a remote `$ref`; it never answers 500 and never fetches what a body points at."""

from __future__ import annotations

import httpx
import pytest

from core.testing import ScriptedProvider
from tests.server.registry_helpers import auth, registration, registry_bot

pytestmark = pytest.mark.anyio


def _deep(levels: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


async def test_malformed_bodies_get_400(tmp_path, counting_server) -> None:
    surrogate = b'{"name": "echo\\ud83d", "description": "x", "callback_url": "http://127.0.0.1:9/cb", "source": "t"}'
    bodies = {
        "lone surrogate in the name": surrogate,
        "parameters 100 deep": registration("deep", "http://127.0.0.1:9/cb", parameters=_deep(100)),
        "remote $ref": registration(
            "fetchy",
            "http://127.0.0.1:9/cb",
            parameters={"type": "object", "properties": {"a": {"$ref": f"{counting_server.url}/a.json"}}},
        ),
        "description not a string": registration("typed", "http://127.0.0.1:9/cb", description=["x"]),
    }
    repaired = (
        b'{"name": "ok_name", "description": "half \\udc00", "callback_url": "http://127.0.0.1:9/cb", "source": "t"}'
    )
    statuses = {}
    async with registry_bot(ScriptedProvider(), tmp_path) as (bot, server):
        async with httpx.AsyncClient(base_url=server.url) as http:
            for what, body in bodies.items():
                if isinstance(body, bytes):
                    r = await http.post(
                        "/api/tools/register", content=body, headers={**auth(), "Content-Type": "application/json"}
                    )
                else:
                    r = await http.post("/api/tools/register", json=body, headers=auth())
                statuses[what] = (r.status_code, r.json().get("ok"))
            fixed = await http.post(
                "/api/tools/register", content=repaired, headers={**auth(), "Content-Type": "application/json"}
            )
            listed = await http.get("/api/tools", headers=auth())

    assert statuses == {what: (400, False) for what in bodies}, statuses
    # A lone surrogate in free text is repaired, not refused: the description is stored with U+FFFD.
    assert fixed.status_code == 200 and fixed.json()["tool"]["description"] == "half \ufffd"
    assert listed.status_code == 200
    assert counting_server.hits == []
