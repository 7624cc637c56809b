"""The command line is parsed the same whichever parser reads it: the one holding only the subcommand a line starts
with, or the whole one (which alone says what is wrong with a line, and lists every subcommand in `--help`)."""

import contextlib
import io

import pytest

from core import cli

LINES = [
    ["plugins"],
    ["plugins", "--json", "-c", "bot.toml", "-v"],
    ["plugins", "--js"],
    ["hooks", "--config=bot.toml"],
    ["chat", "--trace", "--reload"],
    ["run", "--role", "worker"],
    ["status", "--json"],
    ["web", "--host", "0.0.0.0", "--port", "8000"],
    ["trace", "-n", "3", "--id", "t1"],
    ["mcp", "list", "--json"],
    ["mcp", "serve", "--http", "--port", "9000"],
    ["new-plugin", "weather", "--dir", "plugins"],
]

REFUSED = [
    ["plugins", "extra"],
    ["plugins", "--bogus"],
    ["run", "--role", "nope"],
    ["mcp"],
    ["mcp", "serve", "--port", "x"],
    ["new-plugin"],
    ["bogus"],
    [],
]


def parse(argv: list[str], whole: bool) -> tuple[object, str, str]:
    """What parsing `argv` gives (the namespace, or the exit status) and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            result: object = vars(cli._parser().parse_args(argv) if whole else cli._parse(argv))
        except SystemExit as exc:
            result = exc.code
    return result, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("argv", LINES, ids=" ".join)
def test_a_line_gives_what_the_whole_parser_gives(argv):
    assert parse(argv, whole=False) == parse(argv, whole=True)
    assert isinstance(parse(argv, whole=False)[0], dict)


@pytest.mark.parametrize("argv", REFUSED, ids=" ".join)
def test_a_refused_line_gets_the_whole_parsers_usage_and_error(argv):
    result, _, err = parse(argv, whole=False)
    assert (result, err) == (2, parse(argv, whole=True)[2])
    assert err.startswith("usage: hookchat")


@pytest.mark.parametrize("argv", [["plugins", "-h"], ["mcp", "serve", "--help"], ["--help"]], ids=" ".join)
def test_help_is_the_whole_parsers(argv):
    assert parse(argv, whole=False) == parse(argv, whole=True)
