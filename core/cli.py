"""The `hookchat` command: `chat` (terminal chat), `run` (start the configured adapters and the tool registry),
`web` (the web console alone), `plugins` (status and failure reasons), `hooks` (the resolved order per event),
`trace` (the last turns' traces), `status` (the inbox's waiting and poison messages, or with `[cluster]` a
cluster's workers and lag), `mcp list|serve` (MCP servers as tool sources; the plugins' tools served over MCP)
and `new-plugin NAME`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from core.utils.heap import command_heap, freeze_started  # the standard library only
from core.utils.process import StopSignals  # the standard library only

# Each command imports what it runs, inside its function: `hookchat --help` and `hookchat plugins` must not pay for
# the web server, the NATS client, the model runtime or the OpenAI client (bench/startup.py, tests/test_imports.py).
if TYPE_CHECKING:
    from core.adapter.console import ConsoleAdapter
    from core.app import HookChat
    from core.config import HookchatConfig
    from core.provider.local import LocalLlamaProvider
    from core.trace import Trace, Tracer
    from core.web import WebConsole

__all__ = ["main", "MCP_TOKEN_ENV"]

#: The environment variable holding the bearer token of `hookchat mcp serve --http`.
MCP_TOKEN_ENV = "HOOKCHAT_MCP_TOKEN"


def _builtin_settings_error(config: HookchatConfig) -> str | None:
    """What is wrong with the operator's settings of a built-in plugin (`[plugins.config.chat] quiet_seconds = -1`),
    or None. Checked before a bot starts: without its chat plugin a bot would start and never answer."""
    from core.builtins import BUILTIN_PLUGINS, builtin_plugins_dir
    from core.services import PluginConfigError, validate_config

    root = builtin_plugins_dir()
    for plugin_id in BUILTIN_PLUGINS:
        values = config.plugins.config.get(plugin_id)
        replaced = any((Path(d) / plugin_id / "manifest.json").is_file() for d in config.plugins.dirs)
        if values is None or replaced or not config.plugins.is_enabled(plugin_id):
            continue
        schema_file = root / plugin_id / "schema.json"
        schema = json.loads(schema_file.read_text(encoding="utf-8")) if schema_file.is_file() else None
        try:
            validate_config(plugin_id, schema, dict(values))
        except PluginConfigError as exc:
            return f"{config.file or 'config'}: [plugins.config.{plugin_id}]: {exc}"
    return None


def _app(config: HookchatConfig, *, console: ConsoleAdapter | None = None) -> HookChat:
    from core.app import HookChat

    return HookChat(config, adapters=[console] if console else [])


@contextlib.asynccontextmanager
async def _serving(
    app: HookChat, *, reload: bool, web: bool, host: str | None = None, port: int | None = None
) -> AsyncIterator[WebConsole | None]:
    """Run `app`, with the plugin reloader (`--reload`) and the web console when asked; stop them in reverse."""
    reloader = console = None
    if reload:
        from core.reload import PluginReloader

        reloader = PluginReloader(app)
    if web:
        from core.web import WebConsole

        console = WebConsole(app, host=host, port=port, reloader=reloader)  # before start: adds the chat
    async with app:
        if reloader is not None:
            await reloader.start()
        try:
            if console is not None:
                await console.start()
                # Printed once, here, and never logged: the log is visible in the console and may be shipped away.
                print(f"[hookchat] web console on {console.login_url}", file=sys.stderr, flush=True)
            freeze_started()  # what start-up made lives until the exit: out of the collector's walks
            try:
                yield console
            finally:
                if console is not None:
                    await console.stop()
        finally:
            if reloader is not None:
                await reloader.stop()


async def _chat(config: HookchatConfig, show_traces: bool = False, reload: bool = False) -> int:
    from core.adapter.console import ConsoleAdapter
    from core.provider.local import LocalLlamaProvider
    from core.trace import render_trace

    if show_traces:
        config.trace.enabled = True
    console = ConsoleAdapter()
    app = _app(config, console=console)

    def print_trace(_tracer: Tracer, trace: Trace) -> None:
        if trace.kind == "turn":
            console.out.write(render_trace(trace.to_dict()) + "\n")
            console.out.flush()

    if show_traces:
        app.tracer.finished.connect(print_trace)  # a strong reference lives in this frame until the chat ends
    loading: asyncio.Task[None] | None = None
    note = ""
    if isinstance(app.provider, LocalLlamaProvider):
        app.provider.check_installed()  # a missing model is said now, not at the first message
        note = " (loading while you type; a first message waits for it)"
    # A plugin that failed to load is logged (stderr) with its reason.
    async with _serving(app, reload=reload, web=False):
        if isinstance(app.provider, LocalLlamaProvider):
            # The prompt comes first; the model loads while the user types, quietly: its progress lines would land
            # in the middle of the line being typed.
            loading = asyncio.create_task(_load_quietly(app.provider), name="hookchat model load")
        print(
            f"[hookchat] chatting with {getattr(app.provider, 'model_name', app.provider.name)}{note}; "
            "/help for commands, /quit or Ctrl-D to leave",
            file=sys.stderr,
            flush=True,
        )
        try:
            await console.repl()
        finally:
            if loading is not None:
                loading.cancel()
                await asyncio.gather(loading, return_exceptions=True)
    return 0


async def _load_quietly(provider: LocalLlamaProvider) -> None:
    """Load the embedded model ahead of the first message; a failure is left for that message's turn, which
    loads again and reports it like any model error."""
    try:
        await provider.load()
    except Exception as exc:
        logging.getLogger("hookchat").info("loading the model ahead of the first message failed: %s", exc)


async def _run(config: HookchatConfig, reload: bool = False) -> int:
    from core.adapter import AdapterError, build_adapters
    from core.adapter.console import ConsoleAdapter
    from core.app import HookChat

    try:
        adapters = build_adapters(config)
    except AdapterError as exc:
        print(f"hookchat: {exc}", file=sys.stderr)
        return 2
    app = HookChat(config, adapters=adapters, serve_tools=True)
    stop = StopSignals(config.deadlines.shutdown_timeout)
    stop.install()
    async with _serving(app, reload=reload, web=config.web.enabled):
        server = app.tool_server
        if server is not None:
            print(f"[hookchat] tool registry on {server.url}", file=sys.stderr, flush=True)
        console = next((a for a in adapters if isinstance(a, ConsoleAdapter)), None)
        await stop.wait(console.repl() if console is not None else None)
    stop.leave()
    return stop.exit_code


async def _run_role(config: HookchatConfig, role: str) -> int:
    """`hookchat run --role gateway|worker`: one part of a cluster (docs/scale-out.md)."""
    from core.adapter import AdapterError, build_adapters
    from core.adapter.console import ConsoleAdapter
    from core.cluster import ClusterError, Gateway, Worker

    try:
        if role == "gateway":
            part: Gateway | Worker = Gateway(
                config, [a for a in build_adapters(config) if not isinstance(a, ConsoleAdapter)]
            )
        else:
            part = Worker(config)
        stop = asyncio.Event()
        # SIGTERM (a deploy, systemd) leaves like Ctrl-C: a worker hands its partitions over before it exits.
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        async with part:
            freeze_started()
            print(f"[hookchat] {role} {part.name} on {config.cluster.url}", file=sys.stderr, flush=True)
            await stop.wait()
    except (AdapterError, ClusterError) as exc:
        print(f"hookchat: {exc}", file=sys.stderr)
        return 2
    return 0


async def _status(config: HookchatConfig, as_json: bool) -> int:
    if "cluster" not in config.model_fields_set:  # one process: its durable inbox
        return await _inbox_status(config, as_json)
    from core.cluster import ClusterError, cluster_status, render_status

    try:
        status = await cluster_status(config.cluster)
    except ClusterError as exc:
        print(f"hookchat: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(status, indent=2) if as_json else render_status(status))
    return 0


async def _inbox_status(config: HookchatConfig, as_json: bool) -> int:
    """The inbox of the history database: how many messages wait for an answer, and those set aside as poison."""
    from core.history import HistoryStore

    path = Path(config.data.history_path)
    waiting, poison = [], []
    if path.is_file():  # noqa: ASYNC240 - one stat in a one-shot command, before anything else runs
        async with HistoryStore(path) as store:
            waiting, poison = await store.waiting(), await store.poisoned()
    if as_json:
        print(
            json.dumps(
                {"inbox": str(path), "waiting": len(waiting), "poison": [e.summary() for e in poison]},
                indent=2,
                ensure_ascii=False,
            )
        )
        return 0
    print(f"inbox {path}: {len(waiting)} message(s) waiting for an answer, {len(poison)} set aside as poison")
    if poison:
        print(
            f"poison (each time a turn for it started, the process ended; [limits] message_attempts = "
            f"{config.limits.message_attempts}):"
        )
    for entry in poison:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry.received_at))
        text = entry.summary()["text"]
        print(
            f"  {when}  {entry.sid}  {entry.attempts} attempt(s)  {json.dumps(text[:80], ensure_ascii=False)}"
            f"  id {entry.id}"
        )
    return 0


async def _web(config: HookchatConfig, host: str | None, port: int | None, reload: bool) -> int:
    from core.app import HookChat

    stop = StopSignals(config.deadlines.shutdown_timeout)
    stop.install()
    async with _serving(HookChat(config), reload=reload, web=True, host=host, port=port):
        await stop.wait()
    stop.leave()
    return stop.exit_code


async def _plugins(config: HookchatConfig, as_json: bool) -> int:
    async with _app(config) as app:
        statuses = app.plugins.statuses()
    failed = 1 if any(s.state == "error" or s.fault for s in statuses) else 0  # a script checking them sees it
    if as_json:
        print(json.dumps([vars(s) for s in statuses], indent=2))
        return failed
    for s in statuses:
        line = f"{s.plugin_id:<24} {s.state:<9} {s.version:<9} {s.origin}"
        print(line)
        if s.reason:
            print(f"{'':<24} reason: {s.reason}")
        if s.fault:
            print(f"{'':<24} faulty: {s.fault}")
        for warning in s.warnings:
            print(f"{'':<24} warning: {warning}")
        for kind in ("hooks", "tools", "tags"):
            items = getattr(s, kind)
            if items:
                print(f"{'':<24} {kind}: {', '.join(items)}")
    return failed


async def _hooks(config: HookchatConfig, as_json: bool) -> int:
    from core.plugin import priority_name

    async with _app(config) as app:
        chains = app.plugins.hook_chains()
        offers = {s.plugin_id: (s.tools, s.tags) for s in app.plugins.statuses() if s.tools or s.tags}
    if as_json:  # the tools and tags are in `hookchat plugins --json`
        print(json.dumps(chains, indent=2))
        return 0
    print("Hooks, in the order a message meets them (higher priority first):")
    for event, chain in chains.items():
        print(f"\n{event}")
        for i, entry in enumerate(chain, 1):
            print(
                f"  {i:>2}. {priority_name(entry['priority']):<16} {entry['plugin_id']}.{entry['function']}"
                f"  (deadline {entry['deadline']:g} s)"
            )
    if offers:
        print("\nWhat each plugin offers the model:")
        for pid, (tools, tags) in offers.items():
            parts = [f"tools: {', '.join(tools)}"] if tools else []
            parts += [f"tags: {', '.join('<' + t + '>' for t in tags)}"] if tags else []
            print(f"  {pid}: {'; '.join(parts)}")
    return 0


async def _mcp_list(config: HookchatConfig, as_json: bool) -> int:
    async with _app(config) as app:
        statuses = app.mcp.status()
    if as_json:
        print(json.dumps(statuses, indent=2))
        return 0
    if not statuses:
        print("no MCP servers configured ([[mcp.servers]] or [mcp] servers_file; see docs/mcp.md)")
    for s in statuses:
        print(
            f"{s['name']:<20} {s['state']:<10} {s['type']:<15} {s['target']}"
            + (f"  ({s['server']})" if s["server"] else "")
        )
        if s["last_error"]:
            print(f"{'':<20} last error: {s['last_error']}")
        for tool in s["tools"]:
            shown = tool["name"] if tool["name"] == tool["remote_name"] else f"{tool['remote_name']} as {tool['name']}"
            print(
                f"{'':<20} {tool['status']:<8} {shown or tool['remote_name']}"
                + (f": {tool['reason']}" if tool["reason"] else "")
            )
    return 1 if any(s["state"] not in ("ready", "idle", "disabled") for s in statuses) else 0


async def _mcp_serve(config: HookchatConfig, http: bool, host: str, port: int) -> int:
    from core.app import HookChat
    from core.config import McpConfig
    from core.mcp import McpToolServer

    # The plugins' tools only: the app connects to no MCP server of its own while it serves (no loops).
    app = HookChat(config.model_copy(update={"mcp": McpConfig()}))
    async with app:
        server = McpToolServer(app.plugins.tools)
        names = ", ".join(t.name for t in server.offered()) or "none"
        freeze_started()  # serves until stopped, like `hookchat run`
        if not http:
            print(f"[hookchat] serving tools over MCP on stdio: {names}", file=sys.stderr, flush=True)
            await server.serve_stdio()
            return 0
        async with server.http(host, port, token=os.environ.get(MCP_TOKEN_ENV) or None) as listener:
            print(f"[hookchat] serving tools over MCP on {listener.url}: {names}", file=sys.stderr, flush=True)
            if not os.environ.get(MCP_TOKEN_ENV):
                print(
                    f"[hookchat] bearer token (set {MCP_TOKEN_ENV} to choose it): {listener.token}",
                    file=sys.stderr,
                    flush=True,
                )
            await asyncio.Event().wait()
    return 0


def _trace(config: HookchatConfig, count: int, trace_id: str | None, as_json: bool) -> int:
    from core.trace import default_file, read_json_lines, render_trace

    path = default_file(Path(config.data.dir), config.trace.file)
    if path is None:
        print("hookchat: [trace] file is empty, so no traces are written; set it to read them here", file=sys.stderr)
        return 2
    traces = [t for t in read_json_lines(path) if t.get("kind") == "turn" or trace_id]
    if trace_id:
        traces = [t for t in traces if t["id"] == trace_id or any(m["id"] == trace_id for m in t["messages"])]
        if not traces:
            print(f"hookchat: no trace {trace_id!r} in {path}", file=sys.stderr)
            return 1
    traces = traces[-count:]
    if not traces:
        print(f"no turn traces in {path} yet", file=sys.stderr)
        return 0
    if as_json:
        print(json.dumps(traces, indent=2, ensure_ascii=False))
        return 0
    print("\n\n".join(render_trace(t) for t in traces))
    return 0


def _new_plugin(name: str, root: Path) -> int:
    from core.scaffold import write_plugin_skeleton

    plugin_id = re.sub(r"[^a-z0-9_]", "_", name.lower()).strip("_")
    if not plugin_id or not plugin_id[0].isalpha():
        print(
            f"hookchat: {name!r} cannot be a plugin id: use letters, digits and '_', starting with a letter",
            file=sys.stderr,
        )
        return 2
    folder = root / plugin_id
    if folder.exists():
        print(f"hookchat: {folder} already exists", file=sys.stderr)
        return 2
    write_plugin_skeleton(folder, plugin_id)
    print(f"created {folder}: run its test with  python -m pytest {folder / 'tests'}")
    return 0


def _global_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """`-c` and `-v`, accepted before the subcommand and after it (`hookchat hooks -c bot.toml`)."""
    # Given after the subcommand only: SUPPRESS keeps the subparser from overwriting what came before it.
    config_default = None if defaults else argparse.SUPPRESS
    verbose_default = False if defaults else argparse.SUPPRESS
    parser.add_argument(
        "-c", "--config", default=config_default, help="config file (default: $HOOKCHAT_CONFIG or ./hookchat.toml)"
    )
    parser.add_argument("-v", "--verbose", action="store_true", default=verbose_default, help="log at INFO level")


#: The subcommands, in the order `hookchat --help` lists them.
_COMMANDS = ("chat", "run", "status", "web", "trace", "plugins", "hooks", "mcp", "new-plugin")


class _LeanParseError(Exception):
    """A command line the one-subcommand parser refused: the whole parser parses it again, to say why."""


class _LeanParser(argparse.ArgumentParser):
    """A parser holding one subcommand, whose refusals are left to the whole parser (its messages name them all)."""

    def error(self, message: str) -> NoReturn:
        raise _LeanParseError(message)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    """The parsed command line. A line starting with a subcommand is parsed by a parser holding that subcommand
    alone (a tenth of the work of building them all); anything it refuses, and every other
    line, by the whole parser, so the usage, the errors and `--help` are the whole parser's."""
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in _COMMANDS:
        with contextlib.suppress(_LeanParseError):
            return _parser(args[0]).parse_args(args)
    return _parser().parse_args(args)


def _parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: every subcommand, or `command`'s alone (a `_LeanParser`)."""
    parser = _new_parser(lean=command is not None, prog="hookchat", description=__doc__)
    _global_options(parser, defaults=True)
    common = argparse.ArgumentParser(add_help=False)
    _global_options(common, defaults=False)
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, text: str) -> argparse.ArgumentParser | None:
        return sub.add_parser(name, help=text, parents=[common]) if command in (None, name) else None

    if chat := add("chat", "chat with the bot in this terminal"):
        chat.add_argument("--trace", action="store_true", help="print each turn's trace after its reply")
        _reload_option(chat)
    if run := add("run", "start the configured adapters, the tool registry and ([web]) the web console"):
        run.add_argument(
            "--role",
            choices=("single", "gateway", "worker"),
            default="single",
            help="single (default): everything in this process; gateway: the adapters, publishing to NATS "
            "JetStream; worker: the pipeline and plugins, consuming from it (docs/scale-out.md)",
        )
        _reload_option(run)
    if status := add(
        "status",
        "show the messages waiting in the inbox and those set aside as poison "
        "(with [cluster]: the cluster's gateways, workers, partitions and lag)",
    ):
        status.add_argument("--json", action="store_true", help="print JSON")
    if web := add("web", "start the web console alone (chat in the browser)"):
        web.add_argument("--host", help="address to bind (default: [web] host, 127.0.0.1)")
        web.add_argument("--port", type=int, help="port (default: [web] port, 8780)")
        _reload_option(web)
    if trace := add("trace", "print the last turns' traces (from the [trace] file)"):
        trace.add_argument("-n", "--count", type=int, default=5, help="how many turns (default 5)")
        trace.add_argument("--id", dest="trace_id", help="only the trace with this id (a turn's or a message's)")
        trace.add_argument("--json", action="store_true", help="print JSON")
    for name, text in (
        ("plugins", "list plugins, their status and what they registered"),
        ("hooks", "show the resolved hook order per event, and the tools and tags offered"),
    ):
        if cmd := add(name, text):
            cmd.add_argument("--json", action="store_true", help="print JSON")
    if mcp := add("mcp", "MCP: list the configured servers, or serve the plugins' tools over MCP"):
        mcp_sub = mcp.add_subparsers(dest="mcp_command", required=True)
        mcp_list = mcp_sub.add_parser("list", help="the MCP servers, their state and their tools", parents=[common])
        mcp_list.add_argument("--json", action="store_true", help="print JSON")
        serve = mcp_sub.add_parser(
            "serve", help="serve the plugins' tools over MCP (stdio, or --http)", parents=[common]
        )
        serve.add_argument(
            "--http",
            action="store_true",
            help=f"streamable HTTP instead of stdio (needs a token: ${MCP_TOKEN_ENV}, or one is made and printed)",
        )
        serve.add_argument("--host", default="127.0.0.1", help="address to bind with --http (default 127.0.0.1)")
        serve.add_argument("--port", type=int, default=8790, help="port with --http (default 8790)")
    if new := add("new-plugin", "create a working plugin skeleton"):
        new.add_argument("name")
        new.add_argument("--dir", default="data/plugins", help="where to create it (default: data/plugins)")
    return parser


def _new_parser(*, lean: bool, prog: str, description: str | None) -> argparse.ArgumentParser:
    return (_LeanParser if lean else argparse.ArgumentParser)(prog=prog, description=description)


def _reload_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reload", action="store_true", help="reload a plugin when its files change")


class _TraceFormatter(logging.Formatter):
    """`LEVEL logger: [trace id] message`: the id of the turn (or message) a line was written in, if any."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        trace_id = getattr(record, "trace_id", "")  # a LogRecord extra set by core.trace's record factory
        return f"{record.levelname} {record.name}: " + (f"[{trace_id}] " if trace_id else "") + record.message


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `hookchat` command."""
    args = _parse(argv)
    from core.utils.compiled_code import reused_compiled_code  # dataclasses and typing: not for `hookchat --help`

    # The collector waits while the command starts, and its last walk at the exit skips what the command made; what
    # dataclasses and typing compile from text is compiled by the first command only (core/utils/compiled_code.py).
    with command_heap(), reused_compiled_code(args.command):
        return _command(args)


def _command(args: argparse.Namespace) -> int:
    """Run the parsed command; its exit status."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "new-plugin":
        return _new_plugin(args.name, Path(args.dir))
    # Records down to INFO are made (the web console shows them); the terminal shows INFO only with -v.
    terminal = logging.getLogger().handlers[0]
    terminal.setLevel(logging.INFO if args.verbose else logging.WARNING)
    terminal.setFormatter(_TraceFormatter())
    from core.config import ConfigError, load_config

    try:
        # `plugins` and `hooks` never call the model, so a missing API key is no reason to refuse them.
        config = load_config(args.config, require_api_key=args.command not in ("plugins", "hooks"))
    except ConfigError as exc:
        print(f"hookchat: {exc}", file=sys.stderr)
        return 2
    problem = _builtin_settings_error(config) if args.command in ("run", "chat", "web") else None
    if problem is not None:
        print(f"hookchat: {problem}", file=sys.stderr)
        return 2
    try:
        if args.command == "trace":
            return _trace(config, args.count, args.trace_id, args.json)
        if args.command == "chat":
            return asyncio.run(_chat(config, args.trace, args.reload))
        if args.command == "run":
            if args.role != "single":
                return asyncio.run(_run_role(config, args.role))
            return asyncio.run(_run(config, args.reload))
        if args.command == "status":
            return asyncio.run(_status(config, args.json))
        if args.command == "web":
            return asyncio.run(_web(config, args.host, args.port, args.reload))
        if args.command == "plugins":
            return asyncio.run(_plugins(config, args.json))
        if args.command == "mcp":
            if args.mcp_command == "list":
                return asyncio.run(_mcp_list(config, args.json))
            return asyncio.run(_mcp_serve(config, args.http, args.host, args.port))
        return asyncio.run(_hooks(config, args.json))
    except KeyboardInterrupt:
        return 130
    except _reported_errors() as exc:  # evaluated only when something was raised
        print(f"hookchat: {exc}", file=sys.stderr)
        return 2


def _reported_errors() -> tuple[type[Exception], ...]:
    """The errors a command reports in one line (exit 2) instead of a traceback: no embedded model, a web console that
    cannot start, OpenTelemetry asked for but not installed, a listener that would be open to strangers or whose
    port is taken, a refused adapter or MCP configuration. Imported once one was raised: their modules are among
    the heavy ones a command imports only when it runs."""
    from core.adapter import AdapterError
    from core.mcp import McpConfigError, McpServeError
    from core.provider.local import ModelNotInstalledError
    from core.server import ListenError
    from core.trace import OtelNotInstalledError
    from core.utils.net import InsecureListenerError
    from core.web import WebConsoleError

    return (
        ModelNotInstalledError,
        WebConsoleError,
        OtelNotInstalledError,
        InsecureListenerError,
        AdapterError,
        McpConfigError,
        McpServeError,
        ListenError,
    )


if __name__ == "__main__":
    sys.exit(main())
