"""copyfix.measure.affinity: the per-CPU table, the pick (aten's time alone, never the
ratio) and the pinning itself (crafted rows; the sweep pins and restores for real)."""

import contextlib
import os

import pytest

from copyfix.measure.affinity import per_cpu, pick, sweep, topology

pytestmark = pytest.mark.harness


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


def test_trim_probe_runs_the_trimmed_hit_path_bit_exact():
    """The probe's trimmed path (evidence for issue 32) takes every strided row on its
    hit path and writes what aten writes (cpu emulation, in a fresh interpreter)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    out = repo / "build" / "test-trim-probe.json"
    out.unlink(missing_ok=True)
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
