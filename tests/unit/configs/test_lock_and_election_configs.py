"""Lock and election configs validate themselves and name the bad field and value."""

from __future__ import annotations

from datetime import timedelta

import pytest

from leasecron.models.configs import ConfigError, ElectionConfig, LockConfig


def test_election_defaults_are_client_go_defaults() -> None:
    config = ElectionConfig()
    assert config.lease_duration == timedelta(seconds=15)
    assert config.renew_deadline == timedelta(seconds=10)
    assert config.retry_period == timedelta(seconds=2)
    assert config.lease_duration_s == 15


def test_renew_deadline_must_exceed_jittered_retry_period_and_says_so() -> None:
    with pytest.raises(ConfigError) as info:
        ElectionConfig(renew_deadline=timedelta(seconds=10), retry_period=timedelta(seconds=9))
    assert str(info.value) == (
        "renewDeadline (10s) must be greater than 1.2 × retryPeriod (9s = 10.8s)"  # noqa: RUF001
    )


def test_lease_duration_must_exceed_renew_deadline() -> None:
    with pytest.raises(ConfigError, match=r"leaseDuration \(10s\) must be at least"):
        ElectionConfig(lease_duration="10s")


@pytest.mark.parametrize(
    ("lease", "renew"), [("3s", "2.5s"), ("2s", "1.5s"), ("10s", "9.5s"), ("1s", "500ms")]
)
def test_lease_duration_needs_a_one_second_margin_for_client_go_and_names_both_values(
    lease: str, renew: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        ElectionConfig(lease_duration=lease, renew_deadline=renew, retry_period="100ms")
    message = str(caught.value)
    assert f"leaseDuration ({lease})" in message
    assert f"renewDeadline ({renew}) + 1s" in message
    assert "client-go" in message and "1-second resolution" in message


@pytest.mark.parametrize(("lease", "renew"), [(3, 2), (2, 1), (16, 15)])
def test_a_margin_of_exactly_one_second_is_accepted(lease: int, renew: int) -> None:
    config = ElectionConfig(
        lease_duration=f"{lease}s", renew_deadline=f"{renew}s", retry_period="500ms"
    )
    assert (config.lease_duration, config.renew_deadline) == (
        timedelta(seconds=lease),
        timedelta(seconds=renew),
    )


@pytest.mark.parametrize("field", ["lease_duration", "renew_deadline", "retry_period"])
def test_election_durations_must_be_positive(field: str) -> None:
    with pytest.raises(ConfigError, match="must be positive"):
        ElectionConfig(**{field: timedelta(0)})


def test_durations_may_be_given_as_seconds_or_go_strings() -> None:
    config = ElectionConfig(lease_duration="3s", renew_deadline=2, retry_period=0.5)
    assert config.renew_deadline == timedelta(seconds=2)
    assert config.retry_period == timedelta(milliseconds=500)
    assert LockConfig(at_most_for="1m30s").at_most_for == timedelta(seconds=90)


def test_a_bad_duration_string_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"^atMostFor: 'soon' is not a duration"):
        LockConfig(at_most_for="soon")


def test_at_least_for_may_not_exceed_at_most_for() -> None:
    with pytest.raises(ConfigError) as info:
        LockConfig(at_most_for="10s", at_least_for="1m")
    assert str(info.value) == "atLeastFor (1m) must not exceed atMostFor (10s)"


def test_at_most_for_must_be_positive_and_at_least_for_not_negative() -> None:
    with pytest.raises(ConfigError, match=r"atMostFor \(0s\) must be positive"):
        LockConfig(at_most_for=0)
    with pytest.raises(ConfigError, match=r"atLeastFor .* must not be negative"):
        LockConfig(at_most_for=5, at_least_for=-1)


def test_lock_lease_duration_is_at_most_for_rounded_up_and_renewed_at_a_third() -> None:
    config = LockConfig(at_most_for=1.5)
    assert config.lease_duration_s == 2
    assert config.renew_interval_s == pytest.approx(0.5)


def test_configs_are_immutable() -> None:
    config = LockConfig(at_most_for=5)
    with pytest.raises(AttributeError):
        config.at_most_for = timedelta(1)  # type: ignore[misc]
