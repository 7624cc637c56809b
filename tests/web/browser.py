"""A headless Debian chromium driven by selenium, for the web console tests (screenshots go to tests/artifacts/)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM = Path("/usr/bin/chromium")


def chromium_available() -> bool:
    """True when Debian's chromium and chromium-driver are installed (.ci/run installs them)."""
    return CHROMEDRIVER.exists() and CHROMIUM.exists() and shutil.which("chromium") is not None


def start_browser(profile: Path, *flags: str):
    """A fresh headless chromium with its own profile folder (and any more command-line `flags`)."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        f"--user-data-dir={profile}",
        *flags,
    ):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
