"""The recorded outcome of a run, from how its handler ended and why it was stopped."""

from __future__ import annotations

import pytest

from leasecron.models.specs import Outcome
from leasecron.runtime._invoke import HandlerEnd, StopReason
from leasecron.runtime._records import describe_error, outcome_of


def end(
    *, error: BaseException | None = None, interrupted: bool = False, abandoned: bool = False
) -> HandlerEnd:
    return HandlerEnd(error=error, interrupted=interrupted, abandoned=abandoned, duration=0.1)


def test_a_handler_that_returns_succeeded_and_an_unguarded_one_is_marked_so() -> None:
    assert outcome_of(end(), reason=None, unguarded=False, term=False) == (Outcome.SUCCEEDED, "")
    assert outcome_of(end(), reason=None, unguarded=True, term=False)[0] is Outcome.UNGUARDED


def test_a_handler_that_raises_failed_with_the_type_and_message() -> None:
    outcome, message = outcome_of(
        end(error=ValueError("bad row 7")), reason=None, unguarded=False, term=False
    )
    assert (outcome, message) == (Outcome.FAILED, "ValueError: bad row 7")
    assert describe_error(KeyError()) == "KeyError"


@pytest.mark.parametrize("term", [False, True])
def test_a_run_whose_grant_was_lost_is_lost_lock_whatever_the_handler_did(term: bool) -> None:
    outcome, message = outcome_of(
        end(interrupted=True, error=RuntimeError("write refused")),
        reason=StopReason.LOST,
        unguarded=False,
        term=term,
    )
    assert outcome is Outcome.LOST_LOCK
    assert "RuntimeError: write refused" in message


def test_a_term_stopped_for_shutdown_or_removal_succeeded_but_a_stopped_tick_did_not() -> None:
    for reason in (StopReason.STOPPING, StopReason.REMOVED):
        stopped = end(interrupted=True)
        assert outcome_of(stopped, reason=reason, unguarded=False, term=True)[0] is (
            Outcome.SUCCEEDED
        )
        outcome, message = outcome_of(stopped, reason=reason, unguarded=False, term=False)
        assert outcome is Outcome.FAILED and "stopped" in message


def test_a_handler_that_would_not_stop_within_the_grace_period_failed() -> None:
    outcome, message = outcome_of(
        end(interrupted=True, abandoned=True),
        reason=StopReason.STOPPING,
        unguarded=False,
        term=True,
    )
    assert outcome is Outcome.FAILED and "grace period" in message
