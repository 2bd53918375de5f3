"""copyfix.measure.affinity: the per-CPU table, the pick (aten's time alone, never the
ratio) and the pinning itself (crafted rows; the sweep pins and restores for real)."""

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from copyfix.measure import affinity, trim_probe
from copyfix.measure.affinity import per_cpu, pick, sweep, topology

pytestmark = pytest.mark.harness
RESULTS = Path(__file__).resolve().parents[2] / "results"


def _row(p, cpu, aten, ratio):
    return {"pass": p, "cpu": cpu, "copy_transposed": {"aten": aten, "ratio": ratio}}


def test_pick_is_the_lowest_aten_time_not_the_lowest_ratio():
    rows = [_row(0, 0, 9.5, 2.0), _row(1, 0, 9.8, 2.1),  # slow aten, low ratio
            _row(0, 1, 6.2, 2.4), _row(1, 1, 6.0, 2.4),
            _row(0, 2, 6.1, 2.6), _row(1, 2, 6.3, 2.6)]  # fmt: skip
    table = per_cpu(rows)
    assert table[0]["aten_us_by_pass"] == [9.5, 9.8]
    assert table[1]["aten_us"] == pytest.approx(6.1) and table[1]["max_ratio"] == 2.4
    assert pick(rows) == 1
    # a tie goes to the lower CPU number
    assert pick([_row(0, 3, 6.0, 1.0), _row(0, 2, 6.0, 3.0)]) == 2


def test_sweep_pins_each_cpu_in_turn_and_restores_the_affinity():
    allowed = os.sched_getaffinity(0)
    cpus = sorted(allowed)
    seen = []

    class Timer:
        def host_us_interleaved(self, columns, rounds, calls):
            seen.append(os.sched_getaffinity(0))
            return {name: (2.0 if name.endswith("gems") else 1.0) for name in columns}

    rows = sweep({"c": lambda: None}, contextlib.nullcontext, Timer(), cpus, 2, 1, 1)
    assert seen == [{c} for c in cpus] * 2
    assert [(r["pass"], r["cpu"]) for r in rows] == [
        (p, c) for p in (0, 1) for c in cpus
    ]
    assert all(r["c"] == {"aten": 1.0, "gems": 2.0, "ratio": 2.0} for r in rows)
    assert os.sched_getaffinity(0) == allowed


def test_topology_names_every_allowed_cpu():
    top = topology()
    assert top["cpus"] == sorted(os.sched_getaffinity(0))
    assert set(top["per_cpu"]) == set(top["cpus"])


def test_trim_probe_runs_the_trimmed_hit_path_bit_exact(tmp_path):
    """The probe's trimmed path (evidence for issue 32) takes every strided row on its
    hit path and writes what aten writes (cpu emulation, in a fresh interpreter)."""
    out = tmp_path / "trim-probe.json"
    subprocess.run(
        [sys.executable, "-m", "copyfix.measure.trim_probe", "--out", str(out)],
        check=True,
        capture_output=True,
        env={**os.environ, "COPYFIX_EMULATION": "cpu"},
    )
    (proc,) = json.loads(out.read_text())["processes"]
    assert set(proc["cases"]) == {
        "copy_transposed", "copy_expanded_sdpa_mask", "copy_step_slice"
    }  # fmt: skip
    for case in proc["cases"].values():
        assert case["bit_exact_vs_aten"] == {"current": True, "trimmed": True}
        assert case["trimmed_fallbacks"] == 0


def test_flips_counts_cpus_on_both_sides_of_the_split_and_the_report_bins_every_sample(
    tmp_path,
):
    def proc(by_cpu):
        rows = [
            {"pass": p, "cpu": cpu, "r": {"aten": a, "ratio": a / 3}}
            for cpu, passes in by_cpu.items()
            for p, a in enumerate(passes)
        ]
        return {"rows": rows, "per_cpu": per_cpu(rows), "pick": pick(rows), "passes": 2}

    # CPU 0 fast then slow, CPU 1 always fast; a second process: CPU 1 slow once
    data = {"processes": [proc({0: [7.0, 9.0], 1: [7.5, 7.6]}), proc({1: [7.2, 8.4]})]}
    assert affinity.flips(data, 8.0) == (2, 2)
    assert affinity.flips({"processes": data["processes"][:1]}, 8.0) == (1, 2)
    assert sorted(affinity.samples(data)) == sorted(
        (a, a / 3) for a in (7.0, 9.0, 7.5, 7.6, 7.2, 8.4)
    )
    path = tmp_path / "affinity.json"
    record = {"machine": "m", "date": "d", "command": "c", "what": "w", **data}
    path.write_text(json.dumps(record))
    table = [ln for ln in affinity.report_lines(path) if ln.startswith("| ")]
    # bins 7-8 (4 samples; ratio a/3 above 2.5 for 7.6 alone), 8-9 (8.4) and 9-10 (9.0)
    assert [ln.split(" | ")[:3] for ln in table[1:]] == [
        ["| 7-8", "4", "3"],
        ["| 8-9", "1", "0"],
        ["| 9-10", "1", "0"],
    ]


def test_recorded_affinity_and_trim_probe_render():
    lines = affinity.report_lines(RESULTS / "affinity_h200.json")
    assert any("CPUs were fast" in ln for ln in lines)
    rows = [
        ln
        for ln in trim_probe.report_lines(RESULTS / "trim_probe_h200.json")
        if ln.startswith("| copy_")
    ]
    assert len(rows) == 3 and all("| yes | 0 |" in ln for ln in rows)
