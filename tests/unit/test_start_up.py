"""A process's start without the collector's passes (burstd.start_up): paused, frozen, back on, and on every way
out of the daemon's start.

The saving itself is measured, not asserted (docs/testbed.md, round thirteen); what is checked here is that the
collector is off while the start imports, on again (with the start's objects frozen) before the work, and never
left off by a start that failed."""

from __future__ import annotations

import gc

import pytest

from burstd import start_up


@pytest.fixture
def collector_on():
    """Each test starts with the collector on, as a process does, and leaves it as it found it."""
    was = gc.isenabled()
    gc.enable()
    yield
    start_up.done()
    (gc.enable if was else gc.disable)()


def frozen(obj) -> bool:
    """In the permanent generation: tracked, but in none of the three the collector passes over. (Not the freeze
    count: other threads of this process free frozen objects while a test runs.)"""
    return gc.is_tracked(obj) and not any(o is obj for o in gc.get_objects())


def test_the_start_runs_without_passes_and_what_it_made_is_frozen_after(collector_on):
    start_up.pause()
    assert not gc.isenabled()
    made = [[i] for i in range(3)]  # objects the start keeps (the collector tracks lists)
    start_up.done()
    assert gc.isenabled()
    assert all(frozen(x) for x in made), "the start's objects were left in the collector's sight"
    assert not frozen([]), "what the process makes after its start is the collector's again"


def test_done_is_a_no_op_without_a_pause_and_a_second_done_does_nothing(collector_on):
    before = [0]
    start_up.done()
    assert gc.isenabled() and not frozen(before)
    start_up.pause()
    start_up.done()
    between = [1]
    start_up.done()
    assert gc.isenabled() and not frozen(between)


def test_a_collector_its_owner_turned_off_stays_off_and_nothing_is_frozen(collector_on):
    gc.disable()
    start_up.pause()
    made = [2]
    start_up.done()
    assert not gc.isenabled()
    assert not frozen(made)


def test_the_block_form_turns_the_collector_back_on_when_the_start_fails(collector_on):
    with pytest.raises(RuntimeError):
        with start_up.paused():
            assert not gc.isenabled()
            raise RuntimeError("import failed")
    assert gc.isenabled()


def test_a_daemon_whose_config_is_refused_leaves_the_collector_on(collector_on, tmp_path, capsys):
    from burstd.daemon.main import main

    bad = tmp_path / "burstd.toml"
    bad.write_text("[daemon]\ncycle_interval_s = 'soon'\n")
    assert main(["--config", str(bad), "--foreground"]) == 2
    assert "cycle_interval_s" in capsys.readouterr().err
    assert gc.isenabled()
