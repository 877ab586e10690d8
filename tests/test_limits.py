"""Open files follow what can be in flight (`limits.in_flight`): a known most
is checked exactly, an uncapped open loop is not refused for its request
count but runs under the ceiling the open-file limit holds."""

from __future__ import annotations

import resource

import pytest

from specreplay.run import limits
from specreplay.errors import ConfigError


class FakeLimit:
    def __init__(self, soft: int, hard: int) -> None:
        self.soft, self.hard = soft, hard

    def get(self, which: int) -> tuple[int, int]:
        assert which == resource.RLIMIT_NOFILE
        return self.soft, self.hard

    def set(self, which: int, values: tuple[int, int]) -> None:
        assert which == resource.RLIMIT_NOFILE and values[1] == self.hard and values[0] <= self.hard
        self.soft = values[0]


@pytest.fixture
def nofile(monkeypatch: pytest.MonkeyPatch) -> FakeLimit:
    fake = FakeLimit(1024, 20_000)
    monkeypatch.setattr(limits.resource, "getrlimit", fake.get)
    monkeypatch.setattr(limits.resource, "setrlimit", fake.set)
    return fake


def test_known_needs_are_checked_exactly_and_refused_when_the_hard_limit_is_too_low(nofile: FakeLimit) -> None:
    assert limits.in_flight("concurrency", 500, None, 12_000, embedded=True) == limits.InFlight(500)
    assert nofile.soft == 256 + 2 * 500
    with pytest.raises(ConfigError, match=r"12000 concurrent streams need about 24256 open files, but this system allows 20000"):
        limits.in_flight("concurrency", 12_000, None, None, embedded=True)
    with pytest.raises(ConfigError, match="lower the concurrency"):
        limits.in_flight("rate", 4_000, 30_000, 12_000, embedded=False)


def test_an_uncapped_open_loop_is_not_refused_for_its_request_count(nofile: FakeLimit) -> None:
    # 12,000 requests at 4,000/s: the refused run. It now runs under the
    # ceiling the hard limit holds, with the soft limit raised to it.
    flight = limits.in_flight("rate", 4_000, None, 12_000, embedded=True)
    assert flight == limits.InFlight((20_000 - 256) // 2, ceiling=(20_000 - 256) // 2)
    assert nofile.soft == 20_000
    note = limits.ceiling_note(flight.ceiling or 0, 4_000)
    assert "holds 9872 requests in flight" in note and "2.5 s on average" in note


def test_an_uncapped_open_loop_that_fits_has_no_ceiling(nofile: FakeLimit) -> None:
    assert limits.in_flight("rate", 10, None, 500, embedded=False) == limits.InFlight(500)
    assert limits.in_flight("speedup", 2, None, 19_000, embedded=False) == limits.InFlight(19_000)


def test_a_limit_that_holds_no_stream_is_refused(nofile: FakeLimit) -> None:
    nofile.soft = nofile.hard = 200
    with pytest.raises(ConfigError, match="this system allows 200 open files"):
        limits.in_flight("rate", 10, None, 500, embedded=False)
