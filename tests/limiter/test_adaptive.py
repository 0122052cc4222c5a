"""The hysteresis trigger: K intervals above to throttle, M calm intervals below release to lift."""

from __future__ import annotations

from cgroup_limiter.adaptive import RELEASE, THROTTLE, Trigger
from cgroup_limiter.config import AdaptiveSettings, Band
from hypothesis import given
from hypothesis import strategies as st

SETTINGS = Band(high=100, low=25, trigger=3, calm=4)  # threshold 100, ceiling 50, release 25
rates = st.lists(st.floats(0, 300, allow_nan=False), max_size=80)


def run(sequence):
    trigger = Trigger()
    return trigger, [trigger.observe(rate, SETTINGS) for rate in sequence]


@given(rates)
def test_throttles_exactly_after_k_consecutive_intervals_above(sequence):
    trigger = Trigger()
    streak = 0
    for rate in sequence:
        was = trigger.throttled
        event = trigger.observe(rate, SETTINGS)
        if not was:
            streak = streak + 1 if rate > SETTINGS.high else 0
            assert (event == THROTTLE) == (streak == SETTINGS.trigger)
            if event:
                streak = 0
        else:
            assert event in (None, RELEASE)


@given(st.lists(st.floats(SETTINGS.low, 50 * 1.2), max_size=60))
def test_a_pod_held_at_the_ceiling_is_never_released(at_ceiling):
    trigger, _ = run([150, 150, 150])
    assert trigger.throttled
    for rate in at_ceiling:
        assert trigger.observe(rate, SETTINGS) is None
    assert trigger.throttled


@given(rates)
def test_events_alternate_throttle_then_release(sequence):
    _, events = run(sequence)
    transitions = [e for e in events if e]
    assert transitions == [THROTTLE, RELEASE] * (len(transitions) // 2) + [THROTTLE] * (len(transitions) % 2)


def test_calm_must_be_consecutive():
    trigger, _ = run([150, 150, 150])
    assert [trigger.observe(r, SETTINGS) for r in (0, 0, 0, 40, 0, 0, 0)] == [None] * 7
    assert trigger.observe(0, SETTINGS) == RELEASE
    assert not trigger.throttled


def test_the_settings_give_each_mode_its_band():
    settings = AdaptiveSettings(
        threshold_bps=100, release_bps=25, ceiling_bps=50, trigger_intervals=3, calm_intervals=4
    )
    assert settings.rate_band() == SETTINGS
    assert settings.pressure_band() == Band(high=10.0, low=2.0, trigger=3, calm=4)
