import os

import pytest

WORKERS_PER_CORE = 2
MAX_WORKERS = 8


@pytest.fixture
def anyio_backend():
    return "asyncio"


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (the README's command): two workers a core, at most eight. A third of the suite's time is spent
    waiting on the processes and servers it starts (hookchat runs, NATS, Synapse, the model), during which a
    second worker computes: on two cores, `tests/cli`, `tests/security`, `tests/trace` and `tests/mcp` took 94 s
    with four workers and 145 s with two."""
    return min(MAX_WORKERS, WORKERS_PER_CORE * len(os.sched_getaffinity(0)))
