"""Registries of named things plugins contribute (tools, tags), where every entry has an owner.

Two plugins may register the same name: the later one is active and the earlier one is kept underneath, so removing
one plugin's entries (always by owner, never by name alone) restores the other's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

from core.utils.log import logger

__all__ = ["OwnedRegistry"]

T = TypeVar("T")


class OwnedRegistry(Generic[T]):
    """Named items with owners; `get(name)` is the most recently added item of that name still registered."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._by_name: dict[str, list[tuple[str, T]]] = {}

    def add(self, name: str, item: T, owner: str) -> None:
        """Register `item` as `name` for `owner`; replaces only an earlier entry of the same owner and name."""
        stack = self._by_name.setdefault(name, [])
        stack[:] = [(o, i) for o, i in stack if o != owner]
        if stack:
            logger.warning("%s %r of %r now shadows the one of %r", self.kind, name, owner, stack[-1][0])
        stack.append((owner, item))

    def remove(self, name: str, owner: str) -> bool:
        """Remove `owner`'s entry `name`; True when there was one. Other owners' entries of that name stay."""
        stack = self._by_name.get(name)
        if not stack:
            return False
        kept = [(o, i) for o, i in stack if o != owner]
        removed = len(kept) != len(stack)
        if kept:
            self._by_name[name] = kept
        else:
            del self._by_name[name]
        return removed

    def remove_owner(self, owner: str) -> list[str]:
        """Remove every entry of `owner`; returns the names removed."""
        names = [name for name, stack in self._by_name.items() if any(o == owner for o, _ in stack)]
        for name in names:
            self.remove(name, owner)
        return names

    def get(self, name: str) -> T | None:
        """The active item called `name`, or None."""
        stack = self._by_name.get(name)
        return stack[-1][1] if stack else None

    def owner_of(self, name: str) -> str | None:
        """The owner of the active item called `name`, or None."""
        stack = self._by_name.get(name)
        return stack[-1][0] if stack else None

    def by_owner(self, owner: str) -> dict[str, T]:
        """Every entry `owner` registered (active or shadowed), by name."""
        return {name: i for name, stack in self._by_name.items() for o, i in stack if o == owner}

    def layers(self) -> Iterator[tuple[str, list[T]]]:
        """Every name with all its items, oldest first (the last one is the active item)."""
        for name, stack in self._by_name.items():
            yield name, [i for _, i in stack]

    def active(self) -> Iterator[T]:
        """The active item of every name."""
        for stack in self._by_name.values():
            yield stack[-1][1]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __len__(self) -> int:
        return len(self._by_name)
