"""`Ok` / `Err` results and the errors plugin services report: the Rust-style error handling of the plugin SDK.

Services whose seed says so (the key-value store, cross-plugin calls, system info) return a `Result`; the rest raise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, NoReturn, TypeVar

__all__ = ["Ok", "Err", "Result", "unwrap", "unwrap_or", "SdkError", "TransportError", "UnwrapError"]

T = TypeVar("T")
E = TypeVar("E")


class SdkError(Exception):
    """A plugin service refused or failed; the message says what to do. `code` is a short stable identifier."""

    def __init__(self, message: str = "", *, code: str = "sdk_error") -> None:
        super().__init__(message)
        self.code = code


class TransportError(SdkError):
    """The path to another component (a plugin, the host, a callback) failed, not the request itself."""

    def __init__(self, message: str = "", *, code: str = "transport_error") -> None:
        super().__init__(message, code=code)


class UnwrapError(SdkError):
    """`unwrap()` was given an `Err` whose error is not an exception (the value is in `.error`)."""

    def __init__(self, error: object) -> None:
        super().__init__(f"called unwrap() on Err({error!r})", code="unwrap_error")
        self.error = error


@dataclass(frozen=True, slots=True)
class Ok(Generic[T]):
    """A success carrying `value`. Match it with `isinstance(r, Ok)` or `case Ok(value):`."""

    value: T

    def is_ok(self) -> bool:
        """True: this is a success."""
        return True

    def is_err(self) -> bool:
        """False: this is not an error."""
        return False

    def unwrap(self) -> T:
        """The value."""
        return self.value

    def unwrap_or(self, default: object) -> T:
        """The value (the default is ignored)."""
        return self.value


@dataclass(frozen=True, slots=True)
class Err(Generic[E]):
    """A failure carrying `error` (usually an `SdkError`). Match it with `isinstance(r, Err)` or `case Err(e):`."""

    error: E

    def is_ok(self) -> bool:
        """False: this is not a success."""
        return False

    def is_err(self) -> bool:
        """True: this is an error."""
        return True

    def unwrap(self) -> NoReturn:
        """Raise the error (an exception is raised as is, any other value as `UnwrapError`)."""
        if isinstance(self.error, BaseException):
            raise self.error
        raise UnwrapError(self.error)

    def unwrap_or(self, default: T) -> T:
        """The default."""
        return default


#: `Result[T, E]` is `Ok[T] | Err[E]`.
Result = Ok[T] | Err[E]


def unwrap(result: Ok[T] | Err[Any]) -> T:
    """The value of an `Ok`; raises the error of an `Err` (see `Err.unwrap`). Anything else is a `TypeError`."""
    if isinstance(result, (Ok, Err)):
        return result.unwrap()
    raise TypeError(f"unwrap() needs an Ok or Err, not {type(result).__name__}")


def unwrap_or(result: Ok[T] | Err[Any], default: T) -> T:
    """The value of an `Ok`, or `default` for an `Err`. Anything else is a `TypeError`."""
    if isinstance(result, (Ok, Err)):
        return result.unwrap_or(default)
    raise TypeError(f"unwrap_or() needs an Ok or Err, not {type(result).__name__}")
