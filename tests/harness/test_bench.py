"""copyfix.bench's record of host runs (harness tests)."""

import json

import pytest

from copyfix import bench

pytestmark = pytest.mark.harness


def host_json(path, ratio, floor_us, **extra):
    row = {"aten": 6.0, "python dispatch floor": floor_us}
    path.write_text(
        json.dumps(
            {
                "device": "GPU",
                "versions": {"flag_gems": "5.0.2"},
                "op_commit": "0123456789abcdef",
                "median_dispatched_over_aten": ratio,
                "median_floor_over_aten": 1.4,
                "host_us": {"a": row, "b": {**row, "python dispatch floor": 9.0}},
                **extra,
            }
        )
    )
    return path


def test_runs_keep_every_run_in_order(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "RUNS", tmp_path / "runs.json")
    first = host_json(tmp_path / "1.json", 2.2, 2.5)
    second = host_json(tmp_path / "2.json", 1.9, 1.3)
    later = host_json(tmp_path / "3.json", 2.0, 1.4, measured_at="2026-12-01 08:00")
    bench.main(["runs", str(first), str(second), "--at", "10:18", "--note", "x"])
    bench.main(["runs", str(later), "--at", "ignored", "--note", "y"])
    runs = json.loads((tmp_path / "runs.json").read_text())
    assert [(r["measured_at"], r["order"], r["note"]) for r in runs] == [
        ("10:18", 1, "x"),
        ("10:18", 2, "x"),
        ("2026-12-01 08:00", 1, "y"),
    ]
    assert [r["median_dispatched_over_aten"] for r in runs] == [2.2, 1.9, 2.0]
    assert [r["median_dispatch_floor_us"] for r in runs] == [5.75, 5.15, 5.2]
    table = bench._runs_table()
    assert len([line for line in table if line.startswith("| 10:18 |")]) == 2
    assert "| 2.200 | 1.400 | n/a | 5.75 | x |" in table[-3]
