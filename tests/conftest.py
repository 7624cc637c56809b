"""The suite's shared set-up: async tests run on asyncio, and under pytest-xdist (`-n auto --dist loadgroup`, the
README's command) the tests that share a fixture wider than one test run on one worker, so that a peer such as
the Synapse homeserver, the embedded model or a NATS server is started once, not once per worker."""

import pytest

WIDER = {"class": 1, "module": 1, "package": 2, "session": 2}


@pytest.fixture
def anyio_backend():
    return "asyncio"


def _shared_fixture_group(item: pytest.Item) -> str | None:
    """The xdist group of a test: its module, when it uses a module-scoped fixture of the suite; the fixture, when
    it uses a package- or session-scoped one (the widest wins); None when each test builds its own."""
    best: tuple[int, str] | None = None
    info = getattr(item, "_fixtureinfo", None)
    for name, defs in sorted(info.name2fixturedefs.items() if info else ()):
        fixture = defs[-1]  # the definition the test gets: the nearest one
        rank = WIDER.get(fixture.scope, 0)
        if not rank or not fixture.baseid.startswith("tests"):  # a plugin's fixture is not a peer of the suite
            continue
        group = item.nodeid.split("::")[0] if rank == 1 else f"{fixture.baseid}::{name}"
        if best is None or rank > best[0]:
            best = (rank, group)
    return best[1] if best else None


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = _shared_fixture_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
