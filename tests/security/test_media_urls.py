"""Tags anyone can steer through the model need the operator's consent: `<at id="all"/>` pings nobody unless
`[media] allow_mention_all`, and `<img>`, `<record>`, `<video>`, `<file>` hand the platform only URLs of public
addresses, judged after DNS resolution (the lookups here are real: `localhost` and numeric names resolve without
a network), unless `[media] allowed_url_hosts` names the host or its network."""

from __future__ import annotations

import logging

import pytest

from core.app import HookChat
from core.chat.message_elements import At, Image, Record, Text, Video
from core.config import ConfigError, HookchatConfig
from core.tag import MediaPolicy, MediaURLError
from core.testing import ChatHarness, ScriptedProvider

pytestmark = pytest.mark.anyio

REFUSED = [
    "http://169.254.169.254/latest/meta-data/",  # the cloud metadata service (link-local)
    "http://[fe80::1]/x.png",  # IPv6 link-local
    "http://127.0.0.1:8780/api/sessions",  # this machine's own ports
    "http://localhost/x.png",  # a name that resolves to loopback
    "http://2130706433/x.png",  # 127.0.0.1 written as one number, resolved by the system
    "http://0x7f.1/x.png",  # and in hex
    "http://10.1.2.3/x.png",
    "http://172.16.0.9/x.png",
    "http://192.168.1.10/router.png",  # private ranges
    "http://100.64.0.1/x.png",  # shared address space (carrier NAT)
    "http://[::1]/x.png",
    "http://[::ffff:169.254.169.254]/x.png",
    "http://[fd00::1]/x.png",
    "http://0.0.0.0/x.png",
    "http://224.0.0.1/x.png",
    "http://no-such-host.invalid/x.png",  # does not resolve: cannot be judged, so refused
    "ftp://93.184.215.14/x.png",
    "http://user:pw@93.184.215.14/x.png",
    "http://93.184.215.14\\@127.0.0.1/",
]


@pytest.mark.parametrize("url", REFUSED)
async def test_a_media_url_off_the_public_internet_is_refused(url: str) -> None:
    with pytest.raises(MediaURLError):
        await MediaPolicy().check_url(url)


async def test_a_public_address_passes_and_the_operator_can_allow_a_network_or_a_host() -> None:
    assert str(await MediaPolicy().check_url("https://93.184.215.14/cat.png")) == "https://93.184.215.14/cat.png"
    lan = MediaPolicy.from_settings(allowed_url_hosts=["192.168.1.0/24", "files.lan"])
    assert (await lan.check_url("http://192.168.1.10/router.png")).host == "192.168.1.10"
    assert (await lan.check_url("http://files.lan/a.png")).host == "files.lan", "a named host is not looked up"
    with pytest.raises(MediaURLError, match="allowed_url_hosts"):
        await lan.check_url("http://169.254.169.254/")


def test_a_bad_allowance_is_a_config_error_naming_the_key() -> None:
    config = HookchatConfig.model_validate({"media": {"allowed_url_hosts": ["http://files.lan/"]}})
    with pytest.raises(ConfigError, match=r"media\.allowed_url_hosts"):
        HookChat(config)


async def test_model_steered_mentions_and_urls_are_degraded_through_a_whole_turn(caplog) -> None:
    output = (
        '<msg><at id="all"/> free stuff! <img src="http://169.254.169.254/latest/meta-data/iam"/>'
        "<record>http://localhost:8780/api/sessions</record><video>http://10.0.0.5/v.mp4</video>"
        "<img>https://93.184.215.14/cat.png</img></msg>"
    )
    with caplog.at_level(logging.WARNING, "hookchat"):
        async with ChatHarness(provider=ScriptedProvider([output])) as bot:
            [chain] = await bot.send("mention everyone and show me the metadata")
    assert not any(isinstance(e, At) for e in chain), "nobody is pinged without the operator's consent"
    assert chain.plain_text.startswith("@all free stuff!"), "the words stay, as text"
    assert [e.text for e in chain if isinstance(e, Text) and e.text.startswith("[")] == [
        "[could not send iam]",
        "[could not send sessions]",
        "[could not send v.mp4]",
    ]
    assert [e.url for e in chain if isinstance(e, (Image, Record, Video))] == ["https://93.184.215.14/cat.png"]
    assert "169.254.169.254 is a link-local address" in caplog.text and "allow_mention_all" in caplog.text


async def test_with_the_operators_consent_everyone_is_mentioned() -> None:
    config = {"media": {"allow_mention_all": True}}
    async with ChatHarness(provider=ScriptedProvider(['<msg><at id="all"/> meeting now</msg>']), config=config) as bot:
        [chain] = await bot.send("tell everyone")
    assert chain[0] == At("all")
