"""The picture budget of tool results: small pictures pass, large ones are re-encoded (and the model is told),
pictures that cannot fit are dropped with a warning."""

import base64
import io
import os

import pytest
from PIL import Image as PILImage

from core.chat.message_elements import File, Image
from core.plugin import BasePlugin
from core.provider import ToolCall, ToolResult
from core.services import MAX_INLINE_PICTURE, apply_picture_budget, llm_tool
from core.testing import ChatHarness, ScriptedProvider

pytestmark = pytest.mark.anyio


def png(width: int, height: int, *, noise: float = 5) -> bytes:
    """A PNG of a gradient with some noise: large as PNG (noise compresses badly), small as JPEG."""
    base = PILImage.linear_gradient("L").resize((width, height)).convert("RGB")
    picture = PILImage.blend(base, PILImage.effect_noise((width, height), noise).convert("RGB"), 0.25)
    out = io.BytesIO()
    picture.save(out, "PNG")
    return out.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_a_picture_within_the_budget_is_left_alone():
    small = Image(base64=b64(png(20, 20)), mime="image/png")
    result = await apply_picture_budget(ToolResult(text="ok", attachments=[small, File(path="/x.txt")]))
    assert result.attachments[0] is small and result.text == "ok"


async def test_a_large_picture_is_reencoded_as_jpeg_within_1280x720_and_the_model_is_told():
    big = png(1600, 1200)
    assert 500 * 1024 < len(b64(big)) <= MAX_INLINE_PICTURE
    result = await apply_picture_budget(ToolResult(text="here", attachments=[Image(base64=b64(big), name="shot.png")]))
    [picture] = result.attachments
    assert picture.mime == "image/jpeg" and picture.name == "shot.jpg"
    assert len(picture.base64) <= 500 * 1024
    decoded = PILImage.open(io.BytesIO(base64.b64decode(picture.base64)))
    assert decoded.format == "JPEG" and decoded.width <= 1280 and decoded.height <= 720
    assert result.text.startswith("here\n[note: picture 'shot.png'")
    assert "re-encoded as JPEG at 960x720" in result.text


async def test_a_data_url_and_a_file_over_the_budget_are_reencoded_too(tmp_path):
    big = png(1400, 1050, noise=8)
    path = tmp_path / "screen.png"
    path.write_bytes(big)
    result = await apply_picture_budget(
        ToolResult(attachments=[Image(url=f"data:image/png;base64,{b64(big)}"), Image(path=str(path))])
    )
    assert [a.mime for a in result.attachments] == ["image/jpeg", "image/jpeg"]
    assert result.text.count("re-encoded") == 2


async def test_an_inline_picture_over_2_mib_is_dropped_with_a_warning(caplog):
    huge = "A" * (MAX_INLINE_PICTURE + 4)
    result = await apply_picture_budget(ToolResult(text="t", attachments=[Image(base64=huge)]))
    assert result.attachments == []
    assert "was dropped" in result.text and "a tool may return" in result.text
    assert any(r.levelname == "WARNING" and "dropped" in r.getMessage() for r in caplog.records)


async def test_a_picture_that_does_not_fit_even_reencoded_is_dropped():
    big = png(1300, 800)
    result = await apply_picture_budget(ToolResult(attachments=[Image(base64=b64(big))]), budget=1024)
    assert result.attachments == []
    assert "even after re-encoding" in result.text


async def test_an_undecodable_picture_over_the_budget_is_dropped():
    junk = b64(os.urandom(600 * 1024))
    result = await apply_picture_budget(ToolResult(attachments=[Image(base64=junk)]))
    assert result.attachments == [] and "could not be decoded" in result.text


async def test_transparent_pictures_are_flattened_onto_white():
    out = io.BytesIO()
    PILImage.new("RGBA", (3000, 2000), (10, 200, 30, 128)).save(out, "PNG")
    result = await apply_picture_budget(ToolResult(attachments=[Image(base64=b64(out.getvalue()))]), budget=20_000)
    [picture] = result.attachments
    decoded = PILImage.open(io.BytesIO(base64.b64decode(picture.base64)))
    assert decoded.mode == "RGB" and decoded.size == (1080, 720)
    red, green, blue = decoded.getpixel((5, 5))
    assert red > 100 and green > 200  # half-transparent green over white, not over black


async def test_through_the_agent_loop_the_model_sees_the_note():
    big = b64(png(1600, 1200))

    class Camera(BasePlugin):
        @llm_tool(name="snap", description="Take a picture")
        async def snap(self):
            return ToolResult(text="picture taken", attachments=[Image(base64=big, name="snap.png")])

    provider = ScriptedProvider([[ToolCall("snap", {})], "nice"])
    async with ChatHarness(plugins=[Camera], provider=provider) as bot:
        await bot.send("take a picture")
    [tool_text] = [m.content for m in provider.requests[1].messages if m.role == "tool"]
    assert tool_text.startswith("picture taken\n[note: picture 'snap.png'") and "re-encoded as JPEG" in tool_text
