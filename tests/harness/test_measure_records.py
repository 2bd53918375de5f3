"""The records the device runs write: miss_cost's ``misses`` section and launch_cost's
bounds, computed from the figures (pure functions, on crafted and on recorded data)."""

import json
import subprocess
from pathlib import Path

import pytest

from copyfix.measure.launch_cost import bounds, combine, summarize
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


def _row(eager, after, exact=True, name="copy_transposed"):
    return {"name": name, "backend": "kunlunxin-emulated", "eager_us": eager,
            "before_us": 4 * eager, "after_us": after, "cache_off_us": 4 * eager,
            "bit_exact_vs_eager": {"after": exact, "before": True},
            "after_hits": True}  # fmt: skip


def test_combined_processes_read_each_process_own_ratio():
    # ratios 2.0, 2.6, 2.4: their median is 2.4; the medians' ratio would be 22/8
    runs = [[_row(10.0, 20.0)], [_row(8.0, 20.8)], [_row(5.0, 12.0, exact=False)]]
    (row,) = combine(runs)
    assert row["eager_us"] == 8.0 and row["after_us"] == 20.0
    assert row["median_ratio"]["after_us"] == pytest.approx(2.4)
    assert row["max_ratio"]["after_us"] == pytest.approx(2.6)
    assert [p["after_us"] for p in row["per_process"]] == [20.0, 20.8, 12.0]
    assert row["bit_exact_vs_eager"] == {"after": False, "before": True}
    assert row["after_hits"] is True
    s = summarize([row])["kunlunxin-emulated"]
    assert s["max_after_over_aten"] == pytest.approx(2.4)
    assert bounds({"summary": {"kunlunxin-emulated": s}})[
        "kunlunxin-emulated each after/aten <= 2.5 (issue 32)"
    ]
    # one process alone is the old reading: its own ratio
    assert summarize(runs[1])["kunlunxin-emulated"]["max_after_over_aten"] == 2.6


def test_combined_processes_must_hold_the_same_rows():
    with pytest.raises(ValueError, match="in 1 of 2 runs"):
        combine([[_row(1.0, 2.0)], [_row(1.0, 2.0, name="copy_step_slice")]])


def test_worker_processes_are_run_and_combined(monkeypatch, tmp_path):
    from copyfix.measure import launch_cost

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
    assert launch_cost.main(args) == 0
    data = json.loads(out.read_text())
    assert len(seen) == 3 and data["runs"]["nvidia"] == {"rounds": 7, "processes": 3}
    (row,) = data["ops"]
    assert row["median_ratio"]["after_us"] == pytest.approx(2.2)
    assert len(row["per_process"]) == 3


def _start(date, ratios_by_process, rounds=19, backend="kunlunxin-emulated"):
    """A start whose three strided layouts each ran in len(ratios_by_process) processes
    of aten 10 us, process i at ratios_by_process[i]."""
    from copyfix.measure.launch_cost import STRIDED

    rows = []
    for name in STRIDED:
        runs = [[_row(10.0, 10.0 * r, name=name)] for r in ratios_by_process]
        rows += combine(runs) if len(runs) > 1 else runs[0]
    for r in rows:
        r["backend"] = backend
    n = len(ratios_by_process)
    return {"date": date, "ops": rows, "runs": {backend: {"processes": n, "rounds": rounds}},
            "summary": {"nvidia": {"median_after_over_eager": 2.2}}}  # fmt: skip


def test_starts_table_reads_each_start_and_counts_single_processes():
    from copyfix.measure.launch_cost import start_row, starts_table

    # median of five 2.4 although two processes exceed 2.5; a single process at 2.51
    data = _start("A", [2.3, 2.4, 2.6, 2.7, 2.35])
    data["same_op_other_starts"] = [_start("B", [2.51], rounds=15)]
    row = start_row(data, "kunlunxin-emulated")
    assert row["ratios"] == pytest.approx([2.4] * 3)
    assert (row["over"], row["samples"]) == (6, 15)
    assert row["aten_us"] == (10.0, 10.0)
    assert start_row(data, "kunlunxin-emulated-head") is None
    table = [
        line
        for line in starts_table(data)
        if line.startswith("| A") or line.startswith("| B")
    ]
    assert table == [
        "| A (the record) | 5 x 19 | fork | 2.40 / 2.40 / 2.40 | yes | 10.0-10.0 | 6 of 15 | 2.20 |",
        "| B | 1 x 15 | fork | 2.51 / 2.51 / 2.51 | **no** | 10.0-10.0 | 3 of 3 | 2.20 |",
    ]


def test_starts_table_adds_the_median_over_five_process_starts():
    from copyfix.measure.launch_cost import starts_table

    data = _start("A", [2.4] * 5)
    data["same_op_other_starts"] = [
        _start("C", [2.6] * 5),
        _start("D", [2.45] * 5),
        _start("E", [3.0]),  # one process: not among them
    ]
    rows = [line for line in starts_table(data) if line.startswith("| median")]
    assert rows == [
        "| median of the 3 five-process starts | | fork | 2.45 / 2.45 / 2.45 | yes | | | |"
    ]
    data["same_op_other_starts"][1] = _start("D", [2.55] * 5)
    rows = [line for line in starts_table(data) if line.startswith("| median")]
    assert rows == [
        "| median of the 3 five-process starts | | fork | 2.55 / 2.55 / 2.55 | **no** | | | |"
    ]


def test_starts_table_agrees_with_each_recorded_starts_own_bounds():
    from copyfix.measure.launch_cost import _KX, starts_table

    data = json.loads((RESULTS / "launch_cache_h200.json").read_text())
    starts = [data, *data.get("same_op_other_starts", [])]
    rows = [line for line in starts_table(data) if line.startswith("| 20")]
    want = []
    for start in starts:
        for backend in _KX:
            key = f"{backend} each after/aten <= 2.5 (issue 32)"
            if key in start.get("bounds", {}):
                want.append(start["bounds"][key])
    assert [("| yes |" in line) for line in rows] == want


def test_phase_table_groups_single_processes_by_aten_time():
    from copyfix.measure.launch_cost import phase_table

    calm = _start("A", [2.3, 2.4, 2.6])  # rewritten below to aten 6 us: the calm group
    for r in calm["ops"]:
        for p in r["per_process"]:
            p["eager_us"], p["after_us"] = 6.0, 6.0 * p["after_us"] / 10.0
    data = {**calm, "same_op_other_starts": [_start("B", [2.51])]}
    assert phase_table(data)[-2:] == [
        "| < 8 | 9 | 6 | 2.40 | 2.60 |",
        "| >= 8 | 3 | 0 | 2.51 | 2.51 |",
    ]
