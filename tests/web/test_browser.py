"""The web console in a real headless browser: chat a full turn on the scripted model and see the streamed reply,
open its trace, reload a plugin, save an invalid and then a valid setting, read log lines (of the turn, too)."""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from tests.web.browser import chromium_available, start_browser
from tests.web.conftest import ARTIFACTS

pytestmark = pytest.mark.skipif(not chromium_available(), reason="needs Debian's chromium and chromium-driver")


@pytest.fixture
def browser(tmp_path):
    driver = start_browser(tmp_path / "profile")
    try:
        yield driver
    finally:
        driver.quit()


def shot(driver, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"web-{name}.png"))


def wait_for(driver, condition, timeout: float = 15):
    return WebDriverWait(driver, timeout).until(condition)


def text_in(selector: str, text: str):
    return EC.text_to_be_present_in_element((By.CSS_SELECTOR, selector), text)


def overflowing(driver, selector: str) -> list[str]:
    """The elements matching `selector` whose content is wider than their box (the start of each's text)."""
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])]"
        ".filter((e) => e.scrollWidth > e.clientWidth + 1).map((e) => e.textContent.slice(0, 40))",
        selector,
    )


def test_chat_trace_plugins_settings_and_logs_in_a_browser(live_console, browser):
    link = "https://example.org/" + "a" * 400  # one long word: wrapped, not a page that scrolls sideways
    live_console.provider.add(f"<msg>Hello, I am the bot.</msg><msg>Here is a second message. {link}</msg>")
    browser.get(live_console.login_url)  # as `hookchat web` prints it: the token moves into a cookie
    assert "token" not in browser.current_url, "the token leaves the address bar (and the history)"
    browser.get(live_console.url + "/#chat")
    wait_for(browser, EC.presence_of_element_located((By.CSS_SELECTOR, "#chat-log[data-ready]")))

    box = browser.find_element(By.ID, "chat-input")
    box.send_keys("hi bot", Keys.ENTER)
    wait_for(browser, text_in("#chat-log", "Here is a second message."))  # in the draft first, as it streams
    # Read once the turn has ended: until then the draft is a `.msg.bot` too, removed when its message arrives.
    wait_for(browser, EC.element_to_be_clickable((By.ID, "chat-send")))
    replies = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#chat-log .msg.bot")]
    assert [r.splitlines()[0] for r in replies] == ["Hello, I am the bot.", f"Here is a second message. {link}"], (
        "each <msg> of the streamed answer arrives as a message of its own"
    )
    assert browser.find_element(By.CSS_SELECTOR, "#chat-log .msg.user").text == "hi bot"
    links = browser.find_elements(By.CSS_SELECTOR, "#chat-log a.trace-link")
    assert len(links) == 2, "one trace link under each reply, and no bare one for the turn they already link to"
    shot(browser, "chat")
    assert not overflowing(browser, "#chat-log .msg"), "a long word wraps inside its message"

    browser.find_element(By.CSS_SELECTOR, "#chat-log .msg.bot a.trace-link").click()
    try:
        wait_for(browser, text_in("#trace-timeline", "greeter.greet"))
    finally:
        shot(browser, "trace")
    timeline = browser.find_element(By.ID, "trace-timeline").text
    assert "chat.choose_strategy" in timeline and "set buffer" in timeline, "the message's im_message hook"
    assert "model scripted" in timeline and "sent" in timeline
    assert "prompt section 'greeting' added (source 'greeter')" in timeline
    assert "greeter adds its greeting" in browser.find_element(By.ID, "trace-logs").text, "the turn's log lines"
    trace_id = browser.find_element(By.ID, "trace-title").text.split()[-1]
    shot(browser, "trace")
    assert not overflowing(browser, "#trace-timeline .item, #trace-timeline pre"), "long words wrap in the timeline"

    browser.get(live_console.url + "/#plugins")
    reload_button = wait_for(
        browser, EC.element_to_be_clickable((By.CSS_SELECTOR, "tr[data-plugin='greeter'] button.reload"))
    )
    reload_button.click()
    wait_for(browser, text_in("#plugin-message", "greeter: reload -> loaded"))

    wait_for(browser, EC.element_to_be_clickable((By.CSS_SELECTOR, "tr[data-plugin='greeter'] button.config"))).click()
    times = wait_for(
        browser, EC.presence_of_element_located((By.CSS_SELECTOR, "#plugin-config-form [data-key='times']"))
    )
    times.clear()
    times.send_keys("0")
    browser.find_element(By.ID, "plugin-config-save").click()
    wait_for(browser, text_in("#plugin-config-message", "not saved"))
    assert "times" in browser.find_element(By.ID, "plugin-config-message").text
    assert "greeter" not in live_console.app.plugins.plugin_config, "an invalid value changes nothing"
    shot(browser, "settings-invalid")

    times.clear()
    times.send_keys("3")
    browser.find_element(By.ID, "plugin-config-save").click()
    wait_for(browser, text_in("#plugin-config-message", "saved: greeter is loaded"))
    assert live_console.app.plugins.get_plugin("greeter").cfg["times"] == 3, "applied without a restart"
    shot(browser, "settings-saved")

    browser.get(live_console.url + "/#logs")
    wait_for(browser, text_in("#logs-lines", "greeter ready: greeting=Hello times=3"))
    trace_box = browser.find_element(By.ID, "logs-trace")
    trace_box.send_keys(trace_id)
    browser.find_element(By.ID, "logs-apply").click()
    wait_for(browser, text_in("#logs-lines", "greeter adds its greeting"))
    lines = browser.find_elements(By.CSS_SELECTOR, "#logs-lines .log-line")
    assert lines and all(line.get_attribute("data-trace") == trace_id for line in lines), "filtered by trace id"
    shot(browser, "logs")
