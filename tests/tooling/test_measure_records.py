"""The records the device runs write: launch_cost's bounds, combined rows and starts,
computed from the figures (pure functions, on crafted and on recorded data)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from copyfix.measure import launch_cost as lc
from copyfix.measure.miss_cost import misses_section

pytestmark = pytest.mark.harness
RESULTS = Path(__file__).resolve().parents[2] / "results"


def test_bounds_follow_the_figures():
    workloads = {
        "all_new": {"on_us_per_call": 111.0, "off_us_per_call": 100.0},
        "round_robin": {"on_us_per_call": 50.0, "off_us_per_call": 100.0},
        "by_call_index_us": {"on": [121.0, 1, 1], "off": [110.0, 1, 1]},
    }
    data = {
        "summary": {
            "nvidia": {"median_after_over_eager": 2.3, "max_after_over_eager": 3.51},
            "kunlunxin-emulated": {"max_after_over_aten": 2.49},
        },
        "misses": misses_section({"workloads": workloads}),
    }
    b = lc.bounds(data)
    assert b["nvidia median after/eager <= 2.3"] is True
    assert b["nvidia each after/eager <= 3.5"] is False
    assert b["kunlunxin-emulated each after/aten <= 2.5"] is True
    assert b["misses all_new cached/uncached <= 1.10"] is False
    assert b["misses first_call cached/uncached <= 1.10"] is True


def _row(eager, after, exact=True, name="copy_transposed"):
    return {"name": name, "backend": "kunlunxin-emulated", "eager_us": eager,
            "before_us": 4 * eager, "after_us": after, "cache_off_us": 4 * eager,
            "bit_exact_vs_eager": {"after": exact, "before": True},
            "after_hits": True}  # fmt: skip


def test_combined_processes_read_each_process_own_ratio():
    # ratios 2.0, 2.6, 2.4: their median is 2.4; the medians' ratio would be 22/8
    runs = [[_row(10.0, 20.0)], [_row(8.0, 20.8)], [_row(5.0, 12.0, exact=False)]]
    (row,) = lc.combine(runs)
    assert row["eager_us"] == 8.0 and row["after_us"] == 20.0
    assert row["median_ratio"]["after_us"] == pytest.approx(2.4)
    assert row["max_ratio"]["after_us"] == pytest.approx(2.6)
    assert [p["after_us"] for p in row["per_process"]] == [20.0, 20.8, 12.0]
    assert row["bit_exact_vs_eager"] == {"after": False, "before": True}
    assert row["after_hits"] is True
    s = lc.summarize([row])["kunlunxin-emulated"]
    assert s["max_after_over_aten"] == pytest.approx(2.4)
    # one process alone is the old reading: its own ratio
    assert lc.summarize(runs[1])["kunlunxin-emulated"]["max_after_over_aten"] == 2.6
    # every process must hold the same rows
    with pytest.raises(ValueError, match="in 1 of 2 runs"):
        lc.combine([[_row(1.0, 2.0)], [_row(1.0, 2.0, name="copy_step_slice")]])


def test_worker_processes_are_run_and_combined(monkeypatch, tmp_path):
    seen, real_run = [], subprocess.run

    def fake_run(cmd, **kwargs):
        if cmd[1:3] != ["-m", "copyfix.measure.launch_cost"]:
            return real_run(cmd, **kwargs)  # (git, for the record's op_commit)
        assert kwargs == {"check": True} and cmd[3] == "nvidia"
        out = Path(cmd[cmd.index("--out") + 1])
        seen.append(cmd)
        row = {**_row(10.0, 20.0 + len(seen)), "backend": "nvidia"}
        info = {"rounds": int(cmd[cmd.index("--rounds") + 1])}
        out.write_text(json.dumps({"ops": [row], "runs": {"nvidia": info}}))

    monkeypatch.setattr("subprocess.run", fake_run)
    out = tmp_path / "r.json"
    args = ["nvidia", "--out", str(out), "--processes", "3", "--rounds", "7"]
    assert lc.main(args) == 0
    data = json.loads(out.read_text())
    assert len(seen) == 3 and data["runs"]["nvidia"] == {"rounds": 7, "processes": 3}
    (row,) = data["ops"]
    assert row["median_ratio"]["after_us"] == pytest.approx(2.2)
    assert len(row["per_process"]) == 3


def _start(date, ratios_by_process, backend="kunlunxin-emulated"):
    """A start of the strided layouts at aten 10 us, process i at ratios_by_process[i]."""
    rows = []
    for name in lc.STRIDED:
        runs = [[_row(10.0, 10.0 * r, name=name)] for r in ratios_by_process]
        rows += [dict(r, backend=backend) for r in lc.combine(runs)]
    n = len(ratios_by_process)
    return {"date": date, "ops": rows, "runs": {backend: {"processes": n}}}


def test_starts_summary_takes_each_starts_median_then_the_median_over_starts():
    # each start's ratio is the median over its processes (2.4 although two exceed 2.5)
    a = _start("A", [2.3, 2.4, 2.6, 2.7, 2.35])
    assert lc.start_entry(a) == {
        "date": "A",
        "kunlunxin-emulated": pytest.approx([2.4] * 3),
    }
    data = {"op_commit": "abcdef0123", "date": "A", "ops": a["ops"], "runs": a["runs"]}
    for date, ratio in (("C", 2.6), ("D", 2.45)):
        data = lc.add_start(
            {**_start(date, [ratio] * 5), "starts": data.get("starts", {})}
        )
    data = lc.add_start({**data, **a, "op_commit": "abcdef0123"})
    st = data["starts"]
    assert [e["date"] for e in st["each"]] == ["A", "D", "C"]
    assert st["median"] == {"kunlunxin-emulated": pytest.approx([2.45] * 3)}
    assert st["range"] == {"kunlunxin-emulated": [pytest.approx([2.4, 2.6])] * 3}
    assert lc.starts_lines(data)[-1] == (
        "| kunlunxin-emulated | 2.45 / 2.45 / 2.45 "
        "| 2.40-2.60 / 2.40-2.60 / 2.40-2.60 | yes |"
    )
    data = lc.add_start({**_start("D", [2.55] * 5), "starts": st})  # D again: replaced
    assert [e["date"] for e in data["starts"]["each"]] == ["D", "A", "C"]
    assert lc.starts_lines(data)[-1] == (
        "| kunlunxin-emulated | 2.55 / 2.55 / 2.55 "
        "| 2.40-2.60 / 2.40-2.60 / 2.40-2.60 | **no** |"
    )


def test_recorded_starts_begin_with_the_record_and_agree_with_its_summary():
    data = json.loads((RESULTS / "launch_cache_h200.json").read_text())
    st = data["starts"]
    assert st["each"][0] == lc.start_entry(data)
    assert lc.starts_summary(st["each"]) == st
    assert "nvidia" in st["median"]
    assert set(st["median"]) <= {*lc.KUNLUNXIN_BACKENDS, "nvidia"}
    nvidia = data["summary"]["nvidia"]
    assert st["each"][0]["nvidia"] == nvidia["median_after_over_eager"]


def test_starts_summary_reads_nvidias_median_against_its_bound():
    each = [{"date": d, "nvidia": r} for d, r in (("A", 2.2), ("B", 2.4), ("C", 2.35))]
    data = {"op_commit": "abc", "starts": lc.starts_summary(each)}
    assert data["starts"]["median"] == {"nvidia": 2.35}
    assert data["starts"]["range"] == {"nvidia": [2.2, 2.4]}
    assert lc.starts_lines(data)[-1] == "| nvidia | 2.35 | 2.20-2.40 | **no** |"


def test_the_kunlunxin_backend_runs_where_its_pointwise_is_not_patched(tmp_path):
    """launch_cost's kunlunxin-emulated backend in the cpu emulation, two calls a round:
    the KunlunXIN pointwise_dynamic has no pre-image (the cache is generic-only), so
    "before" is that same code, and every column is exact."""
    out = tmp_path / "lc.json"
    env = {**os.environ, "COPYFIX_EMULATION": "cpu"}
    cmd = [sys.executable, "-m", "copyfix.measure.launch_cost", "kunlunxin-emulated"]
    cmd += ["--calls", "2", "--rounds", "1", "--out", str(out)]
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=600)
    rows = json.loads(out.read_text())["ops"]
    assert {r["name"] for r in rows} >= {"copy_transposed", "copy_expanded_sdpa_mask"}
    for r in rows:
        assert r["before_ran_base_code"] and r["after_and_off_bit_exact_vs_before"]
        assert all(r["bit_exact_vs_eager"].values())
