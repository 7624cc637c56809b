"""The web console: chat with the bot, read each turn's trace, see the resolved hooks, manage plugins and their
settings, follow the logs and read or clear sessions. Served by hookchat itself (`hookchat web`, or `hookchat run`
with `[web] enabled = true`); loopback by default, always behind a token (generated into the data directory unless
configured), with `Host` and `Origin` checked.

    console = WebConsole(app)      # before app.start(): adds the web chat adapter
    async with app, console:
        print(console.url)

See docs/web.md.
"""

from core.web._console import SAVED_CONFIG_NAME, WebConsole, WebConsoleError
from core.web._logs import LogEntry, LogFilter, LogHub

__all__ = ["LogEntry", "LogFilter", "LogHub", "SAVED_CONFIG_NAME", "WebConsole", "WebConsoleError"]
