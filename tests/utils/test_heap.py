"""The collector while a command starts (`core/utils/heap.py`): paused, then back as it was."""

from __future__ import annotations

import gc

from core.utils.heap import collector_paused, freeze_started


def test_collections_are_paused_while_a_command_starts_and_resume_after_it():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        assert gc.collect() >= 0  # an explicit collection still runs
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0  # nothing is left frozen by the pause


def test_a_started_bot_resumes_collections_inside_the_pause():
    try:
        with collector_paused():
            freeze_started()
            assert gc.isenabled()
            assert gc.get_freeze_count() > 0
        assert gc.isenabled()
        assert gc.get_freeze_count() > 0  # the started heap stays frozen until a plugin stops (`thaw()`)
    finally:
        gc.unfreeze()


def test_a_collector_disabled_before_the_pause_stays_disabled():
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
