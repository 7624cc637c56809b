"""The collector's part in one command (`core/utils/heap.py`): paused while it starts, everything frozen at its end."""

from __future__ import annotations

import gc

import pytest

from core.utils.heap import command_heap, freeze_started


@pytest.fixture(autouse=True)
def _unfrozen():
    yield
    gc.unfreeze()  # this test process goes on: hand the frozen objects back to the collector


def test_collections_are_paused_while_a_command_starts_and_resume_after_it():
    assert gc.isenabled()
    with command_heap():
        assert not gc.isenabled()
        assert gc.collect() >= 0  # an explicit collection still runs
    assert gc.isenabled()


def test_what_a_command_made_is_frozen_when_it_ends():
    with command_heap():
        made = [[] for _ in range(1000)]
    assert gc.get_freeze_count() >= len(made)  # the process's last collection will not walk them


def test_a_started_bot_resumes_collections_inside_the_block():
    with command_heap():
        freeze_started()
        assert gc.isenabled()
        assert gc.get_freeze_count() > 0
    assert gc.isenabled()


def test_a_collector_disabled_before_the_block_stays_disabled():
    gc.disable()
    try:
        with command_heap():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
