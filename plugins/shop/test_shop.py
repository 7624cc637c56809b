from pathlib import Path

from core.testing import ChatHarness, ScriptedProvider, ToolCall


async def test_shop():
    model = ScriptedProvider([[ToolCall("price", {"item": "apple"})], "<msg>An apple: <euro>0.50</euro></msg>"])
    async with ChatHarness([Path(__file__).parent], model) as bot:
        assert [c.plain_text for c in await bot.send("How much is an apple?")] == ["An apple: 0.50 EUR"]
        assert await bot.send("BUY NOW cheap pills") == []  # the stop-filter: nothing sent, no model call
    assert "The shop opens at 9." in model.requests[0].render_system()
    assert model.requests[1].messages[-1].content == "0.50" and len(model.requests) == 2
