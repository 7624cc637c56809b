"""A real Synapse homeserver for the Matrix adapter's tests: its config generated into a directory
(`python -m synapse.app.homeserver --generate-config`), laid over with what a test needs (SQLite, loopback only, the
client API only, no federation, no key servers, rate limits out of the way), started as a process, and users
registered with `register_new_matrix_user` and the shared secret the generated config holds; and `MatrixUser`, a
person on it driven with matrix-nio."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

__all__ = ["Synapse", "MatrixUser"]

SERVER_NAME = "localhost"
_UNLIMITED = {"per_second": 10_000, "burst_count": 10_000}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _overrides(port: int, home: Path) -> dict:
    return {
        "listeners": [
            {
                "port": port,
                "bind_addresses": ["127.0.0.1"],
                "type": "http",
                "tls": False,
                "x_forwarded": False,
                "resources": [{"names": ["client"], "compress": False}],
            }
        ],
        "database": {"name": "sqlite3", "args": {"database": str(home / "homeserver.db")}},
        "federation_domain_whitelist": [],
        "trusted_key_servers": [],
        "suppress_key_server_warning": True,
        "enable_registration": False,
        "presence": {"enabled": False},
        "url_preview_enabled": False,
        "max_upload_size": "50M",
        "rc_message": _UNLIMITED,
        "rc_registration": _UNLIMITED,
        "rc_admin_redaction": _UNLIMITED,
        "rc_login": {"address": _UNLIMITED, "account": _UNLIMITED, "failed_attempts": _UNLIMITED},
        "rc_joins": {"local": _UNLIMITED, "remote": _UNLIMITED},
        "rc_joins_per_room": _UNLIMITED,
        "rc_invites": {"per_room": _UNLIMITED, "per_user": _UNLIMITED, "per_issuer": _UNLIMITED},
        "rc_3pid_validation": _UNLIMITED,
        "rc_media_create": _UNLIMITED,
        "rc_room_creation": _UNLIMITED,
        "rc_delayed_event_mgmt": _UNLIMITED,
        "rc_reports": _UNLIMITED,
        "log_config": str(home / "log.yaml"),
    }


_LOG_CONFIG = """\
version: 1
formatters: {precise: {format: '%(asctime)s - %(name)s - %(levelname)s - %(message)s'}}
handlers: {file: {class: logging.FileHandler, formatter: precise, filename: HOME/homeserver.log}}
root: {level: WARNING, handlers: [file]}
disable_existing_loggers: false
"""


class Synapse:
    """A Synapse process serving `url` (loopback, a free port) from `home`; `restart()` keeps its database.
    Use it as `with Synapse(path) as server:`."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self._configs: list[Path] = []

    def generate(self) -> None:
        """Generate the config (keys, the registration secret) and lay the test's settings over it."""
        self.home.mkdir(parents=True, exist_ok=True)
        generated = self.home / "homeserver.yaml"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "synapse.app.homeserver",
                "--server-name",
                SERVER_NAME,
                "--config-path",
                str(generated),
                "--data-directory",
                str(self.home),
                "--generate-config",
                "--report-stats=no",
            ],
            check=True,
            cwd=self.home,
            stdout=subprocess.DEVNULL,
        )
        (self.home / "log.yaml").write_text(_LOG_CONFIG.replace("HOME", str(self.home)))
        overrides = self.home / "test-overrides.yaml"
        overrides.write_text(json.dumps(_overrides(self.port, self.home)))  # JSON is YAML
        self._configs = [generated, overrides]

    def start(self) -> None:
        """Start the homeserver and return once its client API answers; `RuntimeError` if it exits or never does."""
        if not self._configs:
            self.generate()
        args = [sys.executable, "-m", "synapse.app.homeserver"]
        for config in self._configs:
            args += ["--config-path", str(config)]
        self.proc = subprocess.Popen(args, cwd=self.home, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/_matrix/client/versions", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace")[-2000:] if self.proc.poll() is not None else ""
                self.stop()
                raise RuntimeError(f"Synapse did not start on {self.url}: {err}\n(see {self.home}/homeserver.log)")
            time.sleep(0.1)

    def stop(self) -> None:
        """Stop the homeserver (SIGTERM, then SIGKILL after 10 s)."""
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            if proc.stderr is not None:
                proc.stderr.close()

    def restart(self) -> None:
        """Stop and start again on the same port, with the same database."""
        self.stop()
        self.start()

    def register(self, localpart: str, password: str, *, admin: bool = False) -> str:
        """Register `@localpart:localhost` with the shared secret (`register_new_matrix_user`); its user id."""
        script = shutil.which("register_new_matrix_user", path=str(Path(sys.executable).parent))
        if script is None:
            raise RuntimeError("register_new_matrix_user is missing: `pip install -e '.[test]'` installs Synapse")
        subprocess.run(
            [
                script,
                "-c",
                str(self._configs[0]),
                "-u",
                localpart,
                "-p",
                password,
                "--admin" if admin else "--no-admin",
                self.url,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=60,
        )
        return f"@{localpart}:{SERVER_NAME}"

    def __enter__(self) -> Synapse:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class MatrixUser:
    """A person on the homeserver, driven with matrix-nio as any client would: creates rooms, writes, uploads, and
    records every event of the rooms it is in (`events`), so a test can wait for what the bot posted."""

    def __init__(self, url: str, user_id: str, password: str) -> None:
        import nio

        self.nio = nio
        self.user_id, self.password = user_id, password
        self.client = nio.AsyncClient(url, user_id)
        self.events: list[tuple[str, dict]] = []  # (room id, raw event), in the order synced
        self._changed: asyncio.Event = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> MatrixUser:
        response = await self.client.login(self.password)
        assert isinstance(response, self.nio.LoginResponse), response
        first = await self.client.sync(timeout=0)
        assert isinstance(first, self.nio.SyncResponse), first
        self._task = asyncio.get_running_loop().create_task(self._sync())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self.client.close()

    async def _sync(self) -> None:
        while True:
            try:
                response = await self.client.sync(timeout=1000)
            except Exception:  # the homeserver restarting
                await asyncio.sleep(0.2)
                continue
            if isinstance(response, self.nio.SyncResponse):
                for room_id, info in response.rooms.join.items():
                    self.events.extend((room_id, e.source) for e in info.timeline.events)
                self._changed.set()
                self._changed = asyncio.Event()
            else:
                await asyncio.sleep(0.2)

    async def wait_for(self, predicate, timeout: float = 20) -> list[tuple[str, dict]]:
        """The events matching `predicate(room_id, event)` once there is at least one (waits up to `timeout`)."""
        async with asyncio.timeout(timeout):
            while True:
                found = [(r, e) for r, e in self.events if predicate(r, e)]
                if found:
                    return found
                await self._changed.wait()

    def from_user(self, room_id: str, sender: str, event_type: str = "m.room.message") -> list[dict]:
        """The events of `event_type` `sender` posted in `room_id`, in order."""
        return [e for r, e in self.events if r == room_id and e.get("sender") == sender and e["type"] == event_type]

    async def create_room(
        self, invite: list[str], *, direct: bool = False, encrypted: bool = False, name: str | None = None
    ) -> str:
        """A new room with `invite` invited; its id."""
        state = (
            [{"type": "m.room.encryption", "state_key": "", "content": {"algorithm": "m.megolm.v1.aes-sha2"}}]
            if encrypted
            else []
        )
        response = await self.client.room_create(
            name=name, invite=invite, is_direct=direct, initial_state=state, preset=self.nio.RoomPreset.private_chat
        )
        assert isinstance(response, self.nio.RoomCreateResponse), response
        return response.room_id

    async def wait_joined(self, room_id: str, user_id: str, timeout: float = 20) -> None:
        """Until `user_id` has joined `room_id`."""
        await self.wait_for(
            lambda r, e: (
                r == room_id
                and e["type"] == "m.room.member"
                and e.get("state_key") == user_id
                and e["content"].get("membership") == "join"
            ),
            timeout,
        )

    async def send(self, room_id: str, content: dict, event_type: str = "m.room.message") -> str:
        """Post an event; its id."""
        response = await self.client.room_send(room_id, event_type, content)
        assert isinstance(response, self.nio.RoomSendResponse), response
        return response.event_id

    async def say(self, room_id: str, text: str, **extra: object) -> str:
        """Post a text message (`extra` goes into its content: `m.mentions`, `m.relates_to`...); its id."""
        return await self.send(room_id, {"msgtype": "m.text", "body": text, **extra})

    async def upload(self, data: bytes, mime: str, name: str) -> str:
        """Upload to the homeserver's media repository; the `mxc://` URI."""
        response, _ = await self.client.upload(io.BytesIO(data), content_type=mime, filename=name, filesize=len(data))
        assert isinstance(response, self.nio.UploadResponse), response
        return response.content_uri

    async def download(self, mxc: str) -> bytes:
        """The bytes behind an `mxc://` URI."""
        response = await self.client.download(mxc)
        assert isinstance(response, self.nio.MemoryDownloadResponse), response
        return response.body
