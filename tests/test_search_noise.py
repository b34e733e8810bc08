"""Timing on a shared machine (search/measure/noise.py): the latency statistic, the reference clock's
disturbance, and a run's host conditions, on synthetic timings."""

from __future__ import annotations

import math

import pytest

from tensorsearch.search.measure import noise
from tensorsearch.search.measure.noise import DISTURBED, HostConditions, ReferenceClock, latency_of


def test_a_latency_is_the_fastest_repeat():
    # noise only adds time: a repeat slowed by a neighbour does not move the latency
    assert latency_of([2.0e-3, 1.1e-3, 9.0e-3]) == 1.1e-3
    assert latency_of([]) == math.inf
    assert noise.LATENCY_STATISTIC == "min"


class FakeClock(ReferenceClock):
    """A ReferenceClock without its kernel: disturbance() only, with its file in tmp_path."""

    def __init__(self, path):
        self.path = path
        self.quiet = self._load()


def test_disturbance_is_the_reference_over_its_quietest_time(tmp_path):
    clock = FakeClock(tmp_path / "ref.json")
    assert clock.quiet == math.inf
    assert clock.disturbance(1.0e-3) == 1.0  # the first time is the quietest yet
    assert clock.disturbance(1.5e-3, 2.5e-3) == pytest.approx(2.0)  # the mean of before and after
    assert clock.disturbance(0.8e-3) == 1.0 and clock.quiet == 0.8e-3  # a quieter time is remembered
    assert clock.disturbance(1.0e-3) == pytest.approx(1.25)
    # the next run on this machine starts from the quietest time seen
    again = FakeClock(tmp_path / "ref.json")
    assert again.quiet == 0.8e-3 and again.disturbance(1.6e-3) == pytest.approx(2.0)


def test_an_unwritable_cache_costs_only_the_memory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    clock = FakeClock(blocker / "ref.json")  # its directory cannot be made
    assert clock.disturbance(1.0e-3) == 1.0 and clock.disturbance(2.0e-3) == pytest.approx(2.0)


def test_host_conditions_of_a_quiet_and_a_busy_run():
    quiet = HostConditions.of([1.0, 1.02, None, 1.1, 1.01])
    assert (quiet.timings, quiet.disturbed) == (4, 0) and quiet.trusted and quiet.warning() is None
    assert quiet.line().startswith("host: quiet") and "1.10x" in quiet.line()
    busy = HostConditions.of([1.0, 2.0, 3.5, 1.9, 1.1, 1.3])
    assert (busy.timings, busy.disturbed) == (6, 4) and busy.worst == 3.5 and not busy.trusted
    assert "disturbed in 4 of 6 timings" in busy.line()
    assert "4 of 6 timings" in busy.warning() and f"{DISTURBED}x" in busy.warning()
    assert HostConditions.of([]).line() == "host: not measured (no reference timings)"
    assert HostConditions.of([]).trusted


def test_the_reference_kernel_runs_in_parallel_and_reads_its_time(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORSEARCH_CACHE", str(tmp_path))
    clock = ReferenceClock("test-cpu", 2)
    assert clock.module.parallel and clock.path.parent == tmp_path / "reference"
    seconds = clock.seconds()
    assert 0 < seconds < 1 and clock.disturbance(seconds) == 1.0 and clock.path.exists()
