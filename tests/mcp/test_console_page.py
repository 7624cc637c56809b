"""The web console's MCP page: each server's state, tools and last error, enable, disable and restart; and the
skills it would offer."""

from __future__ import annotations

import httpx
import pytest

from core.testing import ChatHarness
from core.web import WebConsole
from tests.mcp.servers import Hostile, hostile_server, hostile_tools, serve_http
from tests.mcp.test_skills import make_skills

pytestmark = pytest.mark.anyio


async def test_the_mcp_page_shows_servers_and_skills_and_steers_servers(tmp_path):
    state = Hostile(tools=hostile_tools())
    skills = make_skills(tmp_path)
    async with serve_http(hostile_server(state)) as url:
        config = {
            "mcp": {"servers": [{"name": "hostile", "url": url}]},
            "skills": {"dir": str(skills), "scope": {"weather": {"allow": ["web:dm:s1"]}}},
        }
        async with ChatHarness(config=config) as bot:
            console = WebConsole(bot.app, port=0)
            await console.start()
            try:
                async with httpx.AsyncClient(
                    base_url=console.url, trust_env=False, headers={"Authorization": f"Bearer {console.token}"}
                ) as http:
                    page = (await http.get("/")).text
                    data = (await http.get("/api/mcp")).json()
                    disabled = (await http.post("/api/mcp/hostile/disable")).json()
                    gone = "grow" in bot.app.plugins.tools
                    enabled = (await http.post("/api/mcp/hostile/enable")).json()
                    restarted = (await http.post("/api/mcp/hostile/restart")).json()
                    missing = await http.post("/api/mcp/nothing/restart")
                    unknown = await http.post("/api/mcp/hostile/explode")
            finally:
                await console.stop()
    assert 'href="#mcp"' in page
    [server] = data["servers"]
    assert server["state"] == "ready" and server["type"] == "streamable_http"
    refused = {t["remote_name"]: t["reason"] for t in server["tools"] if t["status"] == "refused"}
    assert "$ref" in refused["fetch_ref"]
    assert disabled["state"] == "disabled" and not gone
    assert enabled["state"] == "ready" and restarted["state"] == "ready" and restarted["connects"] >= 3
    assert missing.status_code == 404 and unknown.status_code == 404
    assert [s["name"] for s in data["skills"]] == ["weather"]
    assert data["skills"][0]["scope"] == {"allow": ["web:dm:s1"]}
    assert "broken/SKILL.md" in data["skill_errors"][0]
