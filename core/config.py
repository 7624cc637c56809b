"""The operator's configuration: one TOML file validated into `HookchatConfig`, secrets from the environment.

`load_config` is the one way in; see docs/configuration.md for every key.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from core.utils.entry_points import entry_points

__all__ = [
    "HookchatConfig",
    "ClusterConfig",
    "DataConfig",
    "PluginsConfig",
    "ProviderConfig",
    "LimitsConfig",
    "DeadlinesConfig",
    "AdapterConfig",
    "AdaptersConfig",
    "ServerConfig",
    "MediaConfig",
    "TraceConfig",
    "WebConfig",
    "McpConfig",
    "McpServerConfig",
    "SkillsConfig",
    "ConfigError",
    "load_config",
    "DEFAULT_CONFIG_PATH",
    "CONFIG_PATH_ENV",
    "API_KEY_ENV",
    "SERVER_TOKEN_ENV",
    "WEB_TOKEN_ENV",
    "PROVIDER_ENTRY_POINT_GROUP",
    "installed_provider_types",
    "unknown_provider_type",
]

DEFAULT_CONFIG_PATH = Path("hookchat.toml")
"""The file `load_config(None)` reads when `HOOKCHAT_CONFIG` is not set (relative to the working directory)."""
CONFIG_PATH_ENV = "HOOKCHAT_CONFIG"
"""Environment variable naming the config file when `load_config` is given no path."""
API_KEY_ENV = "HOOKCHAT_API_KEY"
"""Environment variable holding the default provider's API key when nothing more specific gives one."""
SERVER_TOKEN_ENV = "HOOKCHAT_SERVER_TOKEN"
"""Default name of the environment variable holding the HTTP tool registry's bearer token."""
WEB_TOKEN_ENV = "HOOKCHAT_WEB_TOKEN"
"""Default name of the environment variable holding the web console's token."""

PROVIDER_ENTRY_POINT_GROUP = "hookchat.providers"
"""Entry point group of the provider types (`type = "pkg.module:ProviderClass"`); hookchat's own `openai` and
`local` are registered in it too, in hookchat's pyproject.toml."""
#: The types hookchat itself registers, whose keys are the named fields of `ProviderConfig` (not `options`).
_BUILTIN_PROVIDER_TYPES = ("openai", "local")

_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
_MIB = 1024 * 1024


class ConfigError(ValueError):
    """The config file cannot be used. The message names the file, where (key path, or line and column) and why.

    `path` is the file (None for defaults), `issues` the `(key_path, reason)` pairs of a validation failure, and
    `line`/`column` the position of a TOML syntax error.
    """

    def __init__(
        self,
        message: str,
        *,
        path: Path | None = None,
        issues: list[tuple[str, str]] | None = None,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        super().__init__(message)
        self.path = path
        self.issues = issues or []
        self.line = line
        self.column = column


def _duplicates(names: list[str]) -> str:
    return ", ".join(sorted({n for n in names if names.count(n) > 1}))


def _resolve_path(value: Path, info: ValidationInfo) -> Path:
    """Make a path absolute against the config file's directory (the working directory without a file)."""
    base = (info.context or {}).get("base_dir") or Path.cwd()
    return Path(os.path.normpath(base / value.expanduser()))


_ResolvedPath = Annotated[Path, AfterValidator(_resolve_path)]


class _Section(BaseModel):
    # Unknown keys are errors (a typo must not be silently ignored); defaults go through the validators too, so
    # default paths are made absolute like configured ones.
    model_config = ConfigDict(extra="forbid", validate_default=True)


class DataConfig(_Section):
    """`[data]`: where hookchat keeps its state (history database, plugin data)."""

    dir: _ResolvedPath = Path("data")

    @field_validator("dir", mode="before")
    @classmethod
    def _not_empty(cls, value: Any) -> Any:
        if isinstance(value, str) and (not value.strip() or "\x00" in value):
            raise ValueError("must name a directory (it is empty or contains a NUL character)")
        return value

    @field_validator("dir")
    @classmethod
    def _usable_dir(cls, value: Path) -> Path:
        """The directory exists, or can be created: no part of it is a file, and its nearest existing parent is
        writable (hookchat creates it at start-up)."""
        existing = value
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            where = "it" if existing == value else str(existing)
            raise ValueError(f"{value} cannot be a data directory: {where} is a file, not a directory")
        if existing != value and not os.access(existing, os.W_OK | os.X_OK):
            raise ValueError(f"{value} cannot be created: {existing} is not writable")
        # Permissions are not the whole story (root may write anywhere, but not into /proc or a read-only
        # mount): try it, with a file that is removed at once.
        try:
            fd, probe = tempfile.mkstemp(prefix=".hookchat-probe-", dir=existing)
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            what = "be a data directory" if existing == value else "be created"
            raise ValueError(
                f"{value} cannot {what}: no file can be created in {existing} ({exc.strerror}); "
                "choose a writable directory"
            ) from None
        return value

    @property
    def history_path(self) -> Path:
        """The history database file, `<dir>/history.sqlite3`."""
        return self.dir / "history.sqlite3"


class PluginsConfig(_Section):
    """`[plugins]`: where plugins are found, which load, and each plugin's own settings.

    `enabled` empty means every plugin found is enabled; otherwise only those listed. `disabled` always wins.
    `config` maps a plugin id to its settings table (`[plugins.config.<plugin_id>]`), validated against the
    plugin's `schema.json` when the plugin loads, not here.
    """

    dirs: list[_ResolvedPath] = [Path("plugins"), Path("data/plugins")]
    enabled: list[str] = []
    disabled: list[str] = []
    config: dict[str, dict[str, Any]] = {}

    def is_enabled(self, plugin_id: str) -> bool:
        """Whether the plugin with this id should load, by the `enabled` and `disabled` lists."""
        if plugin_id in self.disabled:
            return False
        return not self.enabled or plugin_id in self.enabled


def installed_provider_types() -> list[str]:
    """The provider types installed packages offer in the `hookchat.providers` entry point group, sorted; what a
    `[[providers]]` entry's `type` may name. Read at each call: installing a package adds its types."""
    return sorted({ep.name for ep in entry_points(group=PROVIDER_ENTRY_POINT_GROUP)})


def unknown_provider_type(name: str, installed: list[str]) -> str:
    """Why `type = name` cannot be used: the installed types, and how to get hookchat's own back when even they are
    missing (they come from its package metadata, which an install older than them lacks)."""
    reason = f"unknown provider type {name!r}; installed types: {', '.join(installed) or 'none'}"
    if not set(_BUILTIN_PROVIDER_TYPES) <= set(installed):
        reason += " (hookchat's own types are missing: reinstall hookchat, e.g. `pip install -e .`)"
    return reason


class ProviderConfig(_Section):
    """One `[[providers]]` entry: a model backend and its models in failover order.

    `type` names a provider type of the `hookchat.providers` entry point group (an unknown one is a config error
    listing the installed ones). `type = "openai"` is any OpenAI-compatible HTTP API (needs `base_url` or the
    official default, and at least one model); `type = "local"` is the embedded local model, or a local server when
    `base_url` is given. The key comes from the environment variable named by `api_key_env`; `api_key` in the file
    works but is discouraged. `temperature`, `top_p`, `max_tokens` and `stop` are sampling defaults for every
    request (unset: the backend's own); `context_tokens`, `threads` and `model_path` configure the embedded model
    and nothing else; `options` holds the keys of a provider type installed from another package.
    """

    name: str = Field(min_length=1)
    type: str = Field(min_length=1)
    base_url: str | None = None
    api_key_env: str | None = Field(default=None, pattern=_ENV_NAME)
    api_key: SecretStr | None = None
    models: list[Annotated[str, Field(min_length=1)]] = []
    timeout: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=2, ge=0)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, gt=0)
    stop: list[Annotated[str, Field(min_length=1)]] = []
    context_tokens: int | None = Field(default=None, gt=0)
    threads: int | None = Field(default=None, gt=0)
    model_path: _ResolvedPath | None = None
    options: dict[str, Any] = {}

    @property
    def embedded(self) -> bool:
        """Whether this entry is the embedded model: `type = "local"` without a `base_url`."""
        return self.type == "local" and not self.base_url

    @property
    def served_by(self) -> str:
        """The provider type that serves this entry: `type`, except that a `local` entry with a `base_url` is a
        local OpenAI-compatible server, served by `openai`."""
        return "openai" if self.type == "local" and self.base_url else self.type

    @field_validator("type")
    @classmethod
    def _installed_type(cls, value: str) -> str:
        installed = installed_provider_types()
        if value not in installed:
            raise ValueError(unknown_provider_type(value, installed))
        return value

    @model_validator(mode="after")
    def _embedded_keys(self) -> ProviderConfig:
        if self.options and self.type in _BUILTIN_PROVIDER_TYPES:
            raise ValueError(
                f"options: only for provider types of other packages; type {self.type!r} takes its keys directly"
            )
        given = [key for key in ("context_tokens", "threads", "model_path") if getattr(self, key) is not None]
        if given and not self.embedded:
            raise ValueError(f'{", ".join(given)}: only for the embedded model (type = "local" without base_url)')
        if self.context_tokens is not None and self.max_tokens is not None and self.max_tokens >= self.context_tokens:
            raise ValueError(f"max_tokens ({self.max_tokens}) must be less than context_tokens ({self.context_tokens})")
        return self

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError("must be an http:// or https:// URL")
        return value

    @field_validator("models")
    @classmethod
    def _openai_needs_model(cls, value: list[str], info: ValidationInfo) -> list[str]:
        if info.data.get("type") == "openai" and not value:
            raise ValueError("an openai provider needs at least one model")
        return value


class LimitsConfig(_Section):
    """`[limits]`: bounds that keep one busy or misbehaving session from taking the whole bot down.

    `history_turns`/`history_tokens` bound the history sent with each request (see History);
    `history_retain_turns` (optional) trims each session's stored history to about that many turns.
    `max_messages_per_turn`/`max_chars_per_turn` cap what one turn sends; past a cap the rest is dropped and the
    user told so. `max_waiting_messages` bounds each session's backlog and `message_attempts` the turns one
    message may cause before it is set aside as poison (docs/pipeline.md, "The durable inbox").
    """

    max_concurrent_turns: int = Field(default=64, gt=0)
    max_steps: int = Field(default=8, gt=0)
    history_turns: int = Field(default=50, ge=0)
    history_tokens: int | None = Field(default=None, gt=0)
    history_retain_turns: int | None = Field(default=None, gt=0)
    max_buffered_sessions: int = Field(default=10_000, gt=0)
    max_tool_timeout: float = Field(default=300.0, gt=0, le=300)
    tool_timeout: float = Field(default=30.0, gt=0)
    max_messages_per_turn: int = Field(default=20, gt=0)
    #: Seconds after which a message left unanswered by a crash is no longer answered at start-up: its sender is
    #: told the bot restarted instead.
    unanswered_max_age: float = Field(default=600.0, ge=0)
    unanswered_notice: str = 'Sorry, I restarted and could not answer your message ("{message}"). Please send it again.'
    max_chars_per_turn: int = Field(default=20_000, gt=0)
    #: Messages of one session that may wait for a turn while its turn runs (they join one waiting batch); past
    #: it the rest are refused and the session is told with `waiting_full_notice` (once per filling).
    max_waiting_messages: int = Field(default=200, gt=0)
    waiting_full_notice: str = (
        "Too many messages are waiting for an answer here: I will answer the first "
        "{limit} and skipped the ones after them. Please send again what still needs "
        "an answer once I have replied."
    )
    #: Turns that may start for one message: one whose turns ended the process this many times (a crash, a kill)
    #: is set aside as poison at the next start, kept in the inbox, and its sender told with `poison_notice`.
    message_attempts: int = Field(default=3, ge=1)
    poison_notice: str = (
        'Sorry, something went wrong every time I tried to answer your message ("{message}"), '
        "so I have stopped trying. Please rephrase it, or tell the bot's operator."
    )
    #: What the sender of a message the cluster's stream refuses for good (too large) is told.
    refused_notice: str = 'Sorry, I could not take your message ("{message}"): {reason}.'

    @field_validator("tool_timeout")
    @classmethod
    def _tool_timeout_within_max(cls, value: float, info: ValidationInfo) -> float:
        cap = info.data.get("max_tool_timeout")
        if cap is not None and value > cap:
            raise ValueError(f"must not exceed max_tool_timeout ({cap})")
        return value


class DeadlinesConfig(_Section):
    """`[deadlines]`: how long a hook may run before it is cancelled, when the loop counts as stalled (0.1 s, so
    a 0.2 s block is reported), how long one plugin's import or `initialize()` may take at start-up, and how long
    a shutdown (Ctrl-C, SIGTERM) may take before the process exits anyway."""

    hook_default: float = Field(default=10.0, gt=0)
    stall_threshold: float = Field(default=0.1, gt=0)
    plugin_start: float = Field(default=30.0, gt=0)
    shutdown_timeout: float = Field(default=10.0, gt=0)


class AdapterConfig(_Section):
    """One `[[adapters.instances]]` entry: a chat platform connection.

    `name` (default: the type) is the adapter name in session ids `name:dm|gm:id`; `options` is passed to the
    adapter, which validates it.
    """

    type: str = Field(min_length=1)
    name: str | None = Field(default=None, pattern=r"^[^:\s]+$")
    enabled: bool = True
    options: dict[str, Any] = {}

    @property
    def adapter_name(self) -> str:
        """The name used in session ids: `name`, or the type when no name is set."""
        return self.name or self.type


class AdaptersConfig(_Section):
    """`[adapters]`: the interactive console, and the list of platform adapters."""

    console: bool = True
    instances: list[AdapterConfig] = []

    @field_validator("instances")
    @classmethod
    def _unique_names(cls, value: list[AdapterConfig]) -> list[AdapterConfig]:
        dupes = _duplicates([a.adapter_name for a in value])
        if dupes:
            raise ValueError(f"adapter names must be unique; give each a distinct `name` ({dupes})")
        return value


class ServerConfig(_Section):
    """`[server]`: the HTTP tool registry. The bearer token comes from the variable named by `token_env`."""

    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65535)
    token_env: str = Field(default=SERVER_TOKEN_ENV, pattern=_ENV_NAME)
    token: SecretStr | None = None
    max_body_bytes: int = Field(default=_MIB, gt=0)


class MediaConfig(_Section):
    """`[media]`: what output tags the model steers may send: files from `allowed_dirs` (besides tool
    attachments), a mention of everyone only with `allow_mention_all`, and URLs only of public addresses unless
    their host or network is in `allowed_url_hosts` (names, addresses or networks such as `192.168.1.0/24`)."""

    allowed_dirs: list[_ResolvedPath] = []
    allow_mention_all: bool = False
    allowed_url_hosts: list[str] = []


class TraceConfig(_Section):
    """`[trace]`: per-turn traces of every hook, model call, tool call, tag and send (see docs/tracing.md).

    `ring_size` finished traces are kept in memory (a turn counted once per message it answered, so a flood's large
    turns take the room of as many small ones); `file` (relative to the data directory; "" for none) gets each
    as one JSON line, moved to `<file>.1` at `max_file_bytes`; `otel = true` exports them as OpenTelemetry spans
    (needs `opentelemetry-sdk`, configured as its documentation says).
    """

    enabled: bool = True
    ring_size: int = Field(default=200, gt=0, le=100_000)
    file: str = "traces.jsonl"
    max_file_bytes: int = Field(default=10 * _MIB, gt=0)
    otel: bool = False


class WebConfig(_Section):
    """`[web]`: the web console (`hookchat run` serves it when `enabled`; `hookchat web` always does).

    Bound to loopback by default, and always behind a token: the variable named by `token_env` (or `token`), else
    one generated at the first start and kept in `<data dir>/web/token` (mode 0600); bound to any other address
    it must be configured. Browsers pass it once as `?token=...` and keep it in a cookie.
    """

    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = Field(default=8780, ge=0, le=65535)
    token_env: str = Field(default=WEB_TOKEN_ENV, pattern=_ENV_NAME)
    token: SecretStr | None = None
    #: The names a browser may use to reach the console (the `Host` header; a literal loopback address always
    #: works, and so does `host` when it is an address): anything else is refused, which defeats DNS rebinding.
    #: `"*"` accepts any name (behind a proxy that checks it).
    allowed_hosts: list[Annotated[str, Field(min_length=1)]] = ["localhost", "127.0.0.1", "::1"]


class McpServerConfig(_Section):
    """One `[[mcp.servers]]` entry: an MCP server whose tools the model may call (docs/mcp.md).

    `type` is `stdio` (`command`, `args`, `env`, `cwd`), `streamable_http` or `sse` (`url`, `headers`); left out,
    it follows from the keys (a `command` is stdio, a `url` ending in `/sse` is SSE, any other `url` streamable
    HTTP). Values of `env` and `headers` may name environment variables as `${NAME}`, read when connecting, so
    secrets stay out of the file. `timeout` bounds each tool call (at most 300 s), `connect_timeout` the start of
    the session; `lazy` connects on the first call instead of at start-up; `tool_prefix` is put before every tool
    name the server offers.
    """

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    type: Literal["stdio", "streamable_http", "sse"] | None = None
    command: str | None = Field(default=None, min_length=1)
    args: list[str] = []
    env: dict[str, str] = {}
    cwd: _ResolvedPath | None = None
    url: str | None = Field(default=None, pattern=r"^https?://")
    headers: dict[str, str] = {}
    enabled: bool = True
    lazy: bool = False
    timeout: float = Field(default=30.0, gt=0, le=300)
    connect_timeout: float = Field(default=30.0, gt=0, le=300)
    tool_prefix: str = Field(default="", pattern=r"^[A-Za-z0-9_.-]{0,32}$")

    @model_validator(mode="after")
    def _transport(self) -> McpServerConfig:
        if self.type is None:
            if self.command:
                self.type = "stdio"
            elif self.url:
                self.type = "sse" if self.url.rstrip("/").endswith("/sse") else "streamable_http"
            else:
                raise ValueError(f"MCP server {self.name!r}: give a command (stdio) or a url (streamable_http, sse)")
        if self.type == "stdio" and not self.command:
            raise ValueError(f"MCP server {self.name!r}: a stdio server needs a command")
        if self.type != "stdio" and not self.url:
            raise ValueError(f"MCP server {self.name!r}: a {self.type} server needs a url")
        return self


class McpConfig(_Section):
    """`[mcp]`: MCP servers as tool sources. `servers` are the `[[mcp.servers]]` entries; `servers_file` names an
    `mcpServers` JSON file (Claude Desktop's and KiraAI's format), read as it is, beside them."""

    servers: list[McpServerConfig] = []
    servers_file: _ResolvedPath | None = None

    @field_validator("servers")
    @classmethod
    def _unique_servers(cls, value: list[McpServerConfig]) -> list[McpServerConfig]:
        dupes = _duplicates([s.name for s in value])
        if dupes:
            raise ValueError(f"MCP server names must be unique ({dupes})")
        return value


class SkillsConfig(_Section):
    """`[skills]`: Agent Skills, folders with a `SKILL.md` under `dir` (docs/skills.md). `disabled` names skills
    never offered; `scope` limits one skill to some sessions: `{allow = [sid, ...]}` or `{deny = [sid, ...]}`."""

    dir: _ResolvedPath = Path("skills")
    disabled: list[str] = []
    scope: dict[str, dict[Literal["allow", "deny"], list[str]]] = {}

    @field_validator("scope")
    @classmethod
    def _one_mode(cls, value: dict[str, dict[str, list[str]]]) -> dict[str, dict[str, list[str]]]:
        for name, entry in value.items():
            if len(entry) != 1:
                raise ValueError(f"skill {name!r}: give either allow or deny, not both (or neither)")
        return value


class ClusterConfig(_Section):
    """`[cluster]`: gateways and workers on NATS JetStream (`hookchat run --role gateway|worker`, docs/scale-out.md).

    Not used in the default single-process mode. `partitions` is fixed for the life of the streams (a session's
    partition is a hash of its id modulo this number); keep it well above the number of workers. A message is
    redelivered when its worker has not acknowledged it for `ack_wait` seconds (a running turn keeps extending
    it); a partition whose worker stopped renewing its lease for `lease_seconds` moves to another worker.
    """

    url: str = "nats://127.0.0.1:4222"
    prefix: str = Field(default="hookchat", pattern=r"^[A-Za-z0-9_-]+$")
    partitions: int = Field(default=64, ge=1, le=4096)
    ack_wait: float = Field(default=30.0, gt=0)
    lease_seconds: float = Field(default=6.0, gt=0)
    max_deliver: int = Field(default=5, ge=1)
    dedup_window: float = Field(default=600.0, gt=0)
    receipt_timeout: float = Field(default=5.0, ge=0)
    history_turns: int = Field(default=200, ge=1)
    #: A gateway's publish that the server has not confirmed in this many seconds counts as failed: the gateway
    #: then spools (it keeps the message and its id, and publishes it again; the stream stores it once).
    publish_timeout: float = Field(default=2.0, gt=0)
    #: The bounds of a gateway's spool (`cluster-spool.sqlite3` in its data directory), which holds incoming
    #: messages while the server is away; when it is full, the adapters stop reading from their platforms.
    spool_messages: int = Field(default=100_000, gt=0)
    spool_bytes: int = Field(default=256 * 1024 * 1024, gt=0)
    #: The name this process registers under (default: host name and process id).
    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]+$")


def _empty_table() -> Any:
    """A section's default: an empty table, which `validate_default` turns into the section (typed Any, as the TOML
    it stands for: the section's type is what validation makes of it)."""
    return {}


class HookchatConfig(_Section):
    """The whole configuration. Every section has defaults, so an empty file (or none) is a working config.

    Paths are absolute once loaded. Secrets are `SecretStr`: they print as `**********`; read them with
    `.get_secret_value()`.
    """

    # Section defaults are empty tables validated per load, so their default paths resolve against that file.
    data: DataConfig = Field(default_factory=_empty_table)
    plugins: PluginsConfig = Field(default_factory=_empty_table)
    providers: list[ProviderConfig] = []
    default_provider: str | None = None
    limits: LimitsConfig = Field(default_factory=_empty_table)
    deadlines: DeadlinesConfig = Field(default_factory=_empty_table)
    adapters: AdaptersConfig = Field(default_factory=_empty_table)
    server: ServerConfig = Field(default_factory=_empty_table)
    media: MediaConfig = Field(default_factory=_empty_table)
    #: `[kira]`: values laid over the KiraAI-shaped config that KiraAI plugins read (`ctx.config["bot_config"]`,
    #: `["locale"]`, ...), for what hookchat has no setting of its own for; free-form, see docs/kira-compat.md.
    kira: dict[str, Any] = {}
    trace: TraceConfig = Field(default_factory=_empty_table)
    web: WebConfig = Field(default_factory=_empty_table)
    cluster: ClusterConfig = Field(default_factory=_empty_table)
    mcp: McpConfig = Field(default_factory=_empty_table)
    skills: SkillsConfig = Field(default_factory=_empty_table)
    #: The file this config was read from (None: the defaults, or built in code); messages about it name it.
    _source: Path | None = PrivateAttr(default=None)

    @property
    def source(self) -> str:
        """Where this config came from, for messages: the file, or "the default configuration"."""
        return str(self._source) if self._source is not None else "the default configuration"

    @property
    def file(self) -> Path | None:
        """The file this config was read from by `load_config` (None: the defaults, or built in code); like the
        data directory, no output tag ever sends it."""
        return self._source

    @field_validator("providers")
    @classmethod
    def _unique_providers(cls, value: list[ProviderConfig]) -> list[ProviderConfig]:
        dupes = _duplicates([p.name for p in value])
        if dupes:
            raise ValueError(f"provider names must be unique ({dupes})")
        return value

    @field_validator("default_provider")
    @classmethod
    def _known_provider(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None or "providers" not in info.data:  # nothing to check, or the providers are already wrong
            return value
        names = [p.name for p in info.data["providers"]]
        if value not in names:
            raise ValueError(f"{value!r} is not the name of a [[providers]] entry ({', '.join(names) or 'none'})")
        return value

    def provider(self) -> ProviderConfig | None:
        """The default provider: `default_provider`, else the first listed; None means the embedded local model."""
        for p in self.providers:
            if self.default_provider is None or p.name == self.default_provider:
                return p
        return None


def load_config(
    path: Path | str | None = None, env: Mapping[str, str] | None = None, *, require_api_key: bool = True
) -> HookchatConfig:
    """Read, validate and complete the configuration.

    With `path` None the file is `$HOOKCHAT_CONFIG`, else `hookchat.toml` in the working directory, and a missing
    default file gives the defaults; an explicit `path` must exist. Relative paths in the file resolve against the
    file's directory. Secrets are then filled from `env` (default `os.environ`): each provider's key from its
    `api_key_env` variable (overriding `api_key`), else `HOOKCHAT_API_KEY` for the default provider if it has no
    key; the server token from its `token_env` variable (default `HOOKCHAT_SERVER_TOKEN`). Raises `ConfigError`,
    also when the default provider names an `api_key_env` variable that is not set and nothing else gives it a key
    (unless `require_api_key` is False: for commands that never call the model, such as `hookchat plugins`).
    """
    env = os.environ if env is None else env
    explicit = path is not None or bool(env.get(CONFIG_PATH_ENV))
    file = Path(path if path is not None else env.get(CONFIG_PATH_ENV) or DEFAULT_CONFIG_PATH).expanduser()
    found = file.is_file()
    if not found and explicit:
        raise ConfigError(f"{file}: config file not found", path=file)
    data = _read_toml(file) if found else {}
    base_dir = file.absolute().parent if found else Path.cwd()
    try:
        config = HookchatConfig.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as exc:
        raise _validation_error(file if found else None, exc) from None
    _apply_env_secrets(config, env, file if found else None, require_api_key)
    config._source = file if found else None
    return config


def _read_toml(file: Path) -> dict[str, Any]:
    # Imported when there is a file to read: tomllib compiles its regular expressions at import, which a command
    # started without a config file need not pay.
    import tomllib

    try:
        with file.open("rb") as f:
            return tomllib.load(f)
    except RecursionError:
        raise ConfigError(
            f"{file}: TOML nested too deeply (arrays or tables inside each other); flatten it", path=file
        ) from None
    except tomllib.TOMLDecodeError as exc:
        reason = str(exc)
        m = re.search(r"\(at line (\d+), column (\d+)\)$", reason)
        if m is None:  # "(at end of document)" and the like: no line to point at
            raise ConfigError(f"{file}: TOML syntax error: {reason}", path=file) from None
        line, column = int(m.group(1)), int(m.group(2))
        reason = reason[: m.start()].rstrip()
        raise ConfigError(
            f"{file}:{line}:{column}: TOML syntax error: {reason}", path=file, line=line, column=column
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file}: cannot read config file: {exc}", path=file) from None


def _key_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _validation_error(file: Path | None, exc: ValidationError) -> ConfigError:
    issues = []
    for e in exc.errors(include_url=False, include_input=False):
        reason = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            reason = "unknown key (check the spelling; see docs/configuration.md)"
        issues.append((_key_path(e["loc"]), reason))
    where = str(file) if file is not None else "config"
    lines = [f"{where}: {key}: {reason}" for key, reason in issues]
    return ConfigError("\n".join(lines), path=file, issues=issues)


def _apply_env_secrets(
    config: HookchatConfig, env: Mapping[str, str], file: Path | None, require_api_key: bool = True
) -> None:
    for p in config.providers:
        if p.api_key_env and env.get(p.api_key_env):
            p.api_key = SecretStr(env[p.api_key_env])
    default = config.provider()
    if default is not None and default.api_key is None and env.get(API_KEY_ENV):
        default.api_key = SecretStr(env[API_KEY_ENV])
    if (
        require_api_key
        and default is not None
        and default.api_key is None
        and default.api_key_env
        and not default.embedded
    ):
        # Naming a variable says the endpoint needs a key: without it every request would fail (HTTP 401).
        key = f"providers[{config.providers.index(default)}].api_key_env"
        reason = (
            f"the environment variable {default.api_key_env} is not set: export it with the API key of "
            f"provider {default.name!r} (or remove api_key_env if the endpoint needs no key)"
        )
        raise ConfigError(f"{file or 'config'}: {key}: {reason}", path=file, issues=[(key, reason)])
    if env.get(config.server.token_env):
        config.server.token = SecretStr(env[config.server.token_env])
    if env.get(config.web.token_env):
        config.web.token = SecretStr(env[config.web.token_env])
