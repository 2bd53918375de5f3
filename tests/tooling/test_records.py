"""copyfix.records: every writer merges through it, and merging a stored record's own
section back reproduces the stored file byte for byte (apart from stamps and notes)."""

import json
import shutil
from pathlib import Path

import pytest

from copyfix import records

pytestmark = pytest.mark.harness

RESULTS = Path(__file__).resolve().parents[2] / "results"


def _copy(name, tmp_path) -> Path:
    return Path(shutil.copy(RESULTS / name, tmp_path / name))


@pytest.mark.parametrize(
    "line, expected",
    [
        ("===== 5 passed in 1.00s =====", (5, 0, 0, 0)),
        (
            "== 1 failed, 2 passed, 3 skipped, 4 warnings in 9.1s (0:00:09) ==",
            (2, 1, 3, 0),
        ),
        ("=== 2 passed, 1 error in 0.5s ===", (2, 0, 0, 1)),
        ("=== 3 errors in 0.5s ===", (0, 0, 0, 3)),
        ("=== 1 xfailed, 2 deselected in 0.1s ===", (0, 0, 0, 0)),
        ("=== no tests ran in 0.01s ===", (0, 0, 0, 0)),
        ("1234 passed, 5 skipped, 3 warnings in 120.33s (0:02:00)", (1234, 0, 5, 0)),
    ],
)
def test_parse_summary(line, expected):
    got = records.parse_summary(f"noise\n{line}\nmore noise\n")
    assert (got["passed"], got["failed"], got["skipped"], got["errors"]) == expected


def test_parse_summary_without_a_summary_line():
    assert records.parse_summary("ERROR: usage: pytest [options]\n") is None
    assert records.parse_summary("== test session starts ==\n") is None


def test_stamp_names_the_run():
    s = records.stamp("src/flag_gems/ops/copy.py", env=None, mode="cpu", command=None)
    assert list(s) == ["date", "machine", "op_commit", "measured_paths", "mode"]
    assert s["measured_paths"] == ["src/flag_gems/ops/copy.py"]
    assert s["date"].endswith(" UTC") and s["machine"] == records.machine()
    assert records.stamp(machine="H200")["machine"] == "H200"


@pytest.mark.parametrize(
    "name",
    ["triton_matrix.json", "launch_cache_misses_h200.json", "conversions_h200.json"],
)  # fmt: skip
def test_whole_records_are_written_as_stored(name, tmp_path):
    path = _copy(name, tmp_path)
    records.write(path, records.load(path))
    assert path.read_text() == (RESULTS / name).read_text()


def _cpu_and_cuda(stem: str) -> list[str]:
    """``stem``'s cpu record, and its cuda one where it stands (it leaves when stale)."""
    assert (RESULTS / f"{stem}_cpu.json").is_file()
    return [
        f"{stem}_{m}.json"
        for m in ("cpu", "cuda")
        if (RESULTS / f"{stem}_{m}.json").is_file()
    ]


def test_upstream_check_sections_merge_back(tmp_path):
    from copyfix.upstream import check

    for name in _cpu_and_cuda("upstream_check"):
        stored = json.loads((RESULTS / name).read_text())
        for label, sec in stored["bases"].items():
            check.write_results(tmp_path / name, label, sec)
        for key in ("note", "stale_note"):  # (hand-written, kept outside the writer)
            stored.pop(key, None)
        assert (tmp_path / name).read_text() == json.dumps(stored, indent=1) + "\n"


def test_upstream_ci_sections_merge_back(tmp_path):
    from copyfix.upstream import ci

    for name in _cpu_and_cuda("upstream_ci"):
        stored = json.loads((RESULTS / name).read_text())
        label = next(b for b, s in stored["bases"].items() if all(
            s[k] == stored[k] for k in ("mode", "machine", "op_commit")))  # fmt: skip
        path = tmp_path / name
        path.write_text(json.dumps(stored))
        ci.write_results(path, label, stored["bases"][label])
        stored.pop("note", None)  # (hand-written, kept outside the writer)
        assert path.read_text() == json.dumps(stored, indent=1) + "\n", name


def test_triton_matrix_runs_merge_back(tmp_path, monkeypatch):
    from copyfix import triton_matrix as tm

    monkeypatch.setattr(tm, "REPO", tmp_path)
    path = _copy("triton_matrix.json", tmp_path)
    for run in records.load(path)["runs"]:
        tm._write(run, path)
    assert path.read_text() == (RESULTS / "triton_matrix.json").read_text()


def test_launch_cost_and_misses_merge_back(tmp_path):
    from copyfix.measure import launch_cost, miss_cost

    path = _copy("launch_cache_h200.json", tmp_path)
    data = records.load(path)
    last = data["ops"][-1]["backend"]  # (a backend's new rows go last)
    rows = [r for r in data["ops"] if r["backend"] == last]
    records.update(path, lambda d: launch_cost.with_run(
        d, last, rows, d["runs"][last], d["op_commit"]))  # fmt: skip
    assert path.read_text() == (RESULTS / "launch_cache_h200.json").read_text()
    misses = records.load(RESULTS / "launch_cache_misses_h200.json")
    got = records.update(path, lambda d: miss_cost.with_misses(d, misses, "m.json"))
    assert got["misses_note"].startswith("m.json of the same machine start")
    assert dict(got, misses_note=data["misses_note"]) == data


def test_only_the_writer_dumps_json_into_files():
    """Every JSON file the harness writes goes through records.write (atomic, one
    format): no other module writes json.dumps(...) into a file or json.dump()s."""
    import re

    harness = Path(records.__file__).parent
    direct = re.compile(
        r"json\.dump\(|write_text\(\s*json\.dumps"
    )  # (\s: newlines too)
    found = [
        f"{path.relative_to(harness)}:{text.count(chr(10), 0, m.start()) + 1}"
        for path in harness.rglob("*.py")
        if path.name != "records.py"
        for text in [path.read_text()]
        for m in direct.finditer(text)
    ]
    assert not found, found
