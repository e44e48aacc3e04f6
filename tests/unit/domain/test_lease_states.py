"""The lease state machine: the table of allowed moves is the single source of truth."""

from __future__ import annotations

import itertools

import pytest

from burstd.domain.lease import (
    ALLOWED,
    FINAL_STATES,
    IllegalTransition,
    LeaseState,
    check_transition,
    may_own_instance,
)

HAPPY_PATH = [
    LeaseState.REQUESTED, LeaseState.LAUNCHING, LeaseState.BOOTING, LeaseState.READY,
    LeaseState.DRAINING, LeaseState.TERMINATING, LeaseState.TERMINATED,
]


def test_happy_path_is_allowed():
    for a, b in itertools.pairwise(HAPPY_PATH):
        check_transition(a, b)


@pytest.mark.parametrize("state", sorted(FINAL_STATES))
def test_final_states_go_nowhere(state):
    for target in LeaseState:
        with pytest.raises(IllegalTransition, match="final state"):
            check_transition(state, target)


def test_every_state_reaches_a_final_state():
    """No lease can get stuck: from any state some path ends in TERMINATED or REFUSED."""
    for start in LeaseState:
        seen, frontier = {start}, [start]
        while frontier:
            s = frontier.pop()
            for t in ALLOWED[s] - seen:
                seen.add(t)
                frontier.append(t)
        assert seen & FINAL_STATES, start


def test_no_skipping_the_durable_intent():
    """A cloud call needs a lease first: nothing but REQUESTED leads into LAUNCHING."""
    sources = {s for s, targets in ALLOWED.items() if LeaseState.LAUNCHING in targets}
    assert sources == {LeaseState.REQUESTED}


def test_refused_never_owned_an_instance():
    assert not may_own_instance(LeaseState.REFUSED)
    assert not may_own_instance(LeaseState.REQUESTED)
    assert may_own_instance(LeaseState.FAILED)  # a timed-out launch may still have created a VM


def test_error_message_names_both_states_and_options():
    with pytest.raises(IllegalTransition) as info:
        check_transition(LeaseState.REQUESTED, LeaseState.READY)
    assert "REQUESTED -> READY" in str(info.value)
    assert "LAUNCHING" in str(info.value)
