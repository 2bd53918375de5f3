"""The records the device runs write: miss_cost's ``misses`` section and launch_cost's
bounds, computed from the figures (pure functions, on crafted and on recorded data)."""

import json
from pathlib import Path

import pytest

from copyfix.measure.launch_cost import bounds
from copyfix.measure.miss_cost import misses_section

pytestmark = pytest.mark.harness
RESULTS = Path(__file__).resolve().parents[2] / "results"


def _record(all_new=(110.0, 100.0), rr=(50.0, 100.0), first=(121.0, 110.0)):
    return {
        "workloads": {
            "all_new": {"on_us_per_call": all_new[0], "off_us_per_call": all_new[1]},
            "round_robin": {"on_us_per_call": rr[0], "off_us_per_call": rr[1]},
            "by_call_index_us": {"on": [first[0], 1, 1], "off": [first[1], 1, 1]},
        }
    }


def test_misses_section_pairs_cache_on_with_off():
    m = misses_section(_record())
    assert set(m) == {"all_new", "cyclic_over_cap", "first_call"}
    assert m["all_new"] == {"cached_us": 110.0, "uncached_us": 100.0, "ratio": 1.1}
    assert m["cyclic_over_cap"]["ratio"] == 0.5
    assert m["first_call"] == {"cached_us": 121.0, "uncached_us": 110.0, "ratio": 1.1}


def test_bounds_follow_the_figures():
    data = {
        "summary": {
            "nvidia": {"median_after_over_eager": 2.3, "max_after_over_eager": 3.51},
            "kunlunxin-emulated": {"max_after_over_aten": 2.49},
        },
        "misses": misses_section(_record(all_new=(111.0, 100.0))),
    }
    b = bounds(data)
    assert b["nvidia median after/eager <= 2.3 (issue 31)"] is True
    assert b["nvidia each after/eager <= 3.5 (issue 31)"] is False
    assert b["kunlunxin-emulated each after/aten <= 2.5 (issue 32)"] is True
    assert "kunlunxin-emulated-head each after/aten <= 2.5 (issue 32)" not in b
    assert b["misses all_new cached/uncached <= 1.10 (issue 31)"] is False
    assert b["misses first_call cached/uncached <= 1.10 (issue 31)"] is True


def test_recorded_bounds_are_the_recorded_figures_own():
    data = json.loads((RESULTS / "launch_cache_h200.json").read_text())
    want = bounds(data)
    assert {k: v for k, v in data["bounds"].items() if k in want} == want
