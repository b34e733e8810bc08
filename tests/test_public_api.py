"""The names ``import tensorsearch as ts`` promises: submodules and functions, loaded on first use."""

from __future__ import annotations

import subprocess
import sys

import pytest

import tensorsearch as ts


def test_schedule_trace_and_intrin_are_the_real_objects():
    from tensorsearch.schedule.schedule import Schedule
    from tensorsearch.schedule.trace import Trace
    from tensorsearch.target.matcher import match

    assert ts.Schedule is Schedule
    assert ts.Trace is Trace
    assert ts.intrin.match is match
    sch = ts.Schedule(ts.workloads.reduced("GMM", 0, "float32").func)
    assert isinstance(sch.trace, ts.Trace)


@pytest.mark.parametrize("name", ts.__all__)
def test_every_public_name_resolves(name):
    assert getattr(ts, name) is not None


@pytest.mark.slow
def test_names_resolve_in_a_fresh_interpreter_without_importing_everything():
    code = (
        "import sys, tensorsearch as ts; "
        "assert 'tensorsearch.search' not in sys.modules and 'tensorsearch.intrin' not in sys.modules; "
        "print(ts.Schedule.__name__, ts.Trace.__name__, ts.intrin.match.__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["Schedule", "Trace", "match"]


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="module 'tensorsearch' has no attribute 'Scheduel'"):
        _ = ts.Scheduel
