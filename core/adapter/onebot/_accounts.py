"""The bot accounts one OneBot adapter serves: which connection each has now, which account answers a session,
and the bounded wait of replies produced while an account is disconnected.

A session is answered by the account that last received a message from it (a bounded map, oldest forgotten
first); a session no account has heard from goes to `default_self_id`, else to the only account there is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from core.adapter.onebot._connection import Connection, NotConnected, OneBotError
from core.utils.recent import Recent

__all__ = ["Account", "Accounts"]


@dataclass
class Account:
    """One bot account (`self_id`): its live connection, if any, and how many replies wait for one."""

    self_id: str
    connection: Connection | None = None
    waiting: int = 0

    @property
    def online(self) -> bool:
        """Whether the account has a connection that is open."""
        return self.connection is not None and not self.connection.closed


class Accounts:
    """Every account seen so far, the session routes, and the waiting room for replies."""

    def __init__(
        self,
        *,
        outbox_size: int,
        max_routes: int,
        default_self_id: str | None,
        on_waiting: Callable[[], None] = lambda: None,
    ) -> None:
        self.accounts: dict[str, Account] = {}
        self.routes: Recent[str, str] = Recent(max_routes)
        self._outbox_size = outbox_size
        self._default = default_self_id
        self._unassigned_waiting = 0  # replies waiting for the first account to appear
        self._changed = asyncio.Event()
        self._stopped = False
        self._on_waiting = on_waiting

    @property
    def waiting(self) -> int:
        """Replies waiting for a connection, over all accounts."""
        return self._unassigned_waiting + sum(a.waiting for a in self.accounts.values())

    def attach(self, connection: Connection) -> bool:
        """Make `connection` its account's live one; False (and nothing changes) when that account already has an
        open connection, which the caller refuses."""
        assert connection.self_id is not None
        account = self.accounts.setdefault(connection.self_id, Account(connection.self_id))
        if account.online and account.connection is not connection:
            return False
        account.connection = connection
        self._wake()
        return True

    def detach(self, connection: Connection) -> None:
        """Forget `connection` if it is its account's live one."""
        account = self.accounts.get(connection.self_id or "")
        if account is not None and account.connection is connection:
            account.connection = None

    def route(self, sid: str, self_id: str) -> None:
        """Remember that `self_id` answers session `sid` (the most recent first; the oldest is forgotten)."""
        self.routes.remember(sid, self_id)

    def choose(self, sid: str | None) -> str | None:
        """The account that answers `sid` (None: any session), or None while no account is known yet. Raises
        `OneBotError` when several accounts could and nothing says which."""
        if sid is not None and sid in self.routes:
            return self.routes[sid]
        if self._default is not None:
            return self._default
        if len(self.accounts) == 1:
            return next(iter(self.accounts))
        if not self.accounts:
            return None
        raise OneBotError(
            f"several bot accounts ({', '.join(sorted(self.accounts))}) and none has heard from "
            f"{sid or 'this session'}; set the option default_self_id or pass self_id"
        )

    def live(self, self_id: str | None) -> Connection:
        """The open connection of `self_id` (None: the default account) now, or `NotConnected`."""
        chosen = self_id if self_id is not None else self.choose(None)
        account = self.accounts.get(chosen or "")
        if account is None or not account.online:
            raise NotConnected(f"bot account {chosen} is not connected" if chosen else "no bot account is connected")
        assert account.connection is not None
        return account.connection

    async def connection_for(self, sid: str, deadline: float) -> Connection:
        """The open connection that answers `sid`, waiting (in arrival order) until the loop time `deadline` while
        its account is disconnected. Raises `NotConnected` when the deadline passes, the account's waiting room
        (`outbox_size`) is full, or the accounts are stopped."""
        loop = asyncio.get_running_loop()
        while True:
            if self._stopped:
                raise NotConnected("the adapter is stopping")
            self_id = self.choose(sid)
            account = self.accounts.get(self_id) if self_id is not None else None
            if account is not None and account.online:
                assert account.connection is not None
                return account.connection
            waiting = account.waiting if account is not None else self._unassigned_waiting
            who = f"bot account {self_id}" if self_id else "a bot account"
            if waiting >= self._outbox_size:
                raise NotConnected(f"{who} is disconnected and {waiting} replies already wait for it (outbox_size)")
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise NotConnected(f"{who} was not connected in time to send (offline_send_timeout)")
            self._count(account, +1)
            try:
                async with asyncio.timeout(remaining):
                    await self._changed.wait()
            except TimeoutError:
                pass  # the loop reports it, with the account's name
            finally:
                self._count(account, -1)

    def stop(self) -> None:
        """Wake every waiting reply so it reports that the adapter stopped."""
        self._stopped = True
        self._wake()

    def _count(self, account: Account | None, step: int) -> None:
        if account is not None:
            account.waiting += step
        else:
            self._unassigned_waiting += step
        self._on_waiting()

    def _wake(self) -> None:
        # Waiters resume in the order they started waiting, so queued replies go out in the order produced.
        self._changed.set()
        self._changed = asyncio.Event()
