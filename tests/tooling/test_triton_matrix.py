"""copyfix.triton_matrix's record: counts from pytest's junit file, merge by version."""

import json

import pytest

from copyfix import triton_matrix as tm

pytestmark = pytest.mark.harness

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="2" skipped="3" tests="20">
</testsuite></testsuites>
"""


def test_counts_from_junit(tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    assert tm._counts(path) == {"passed": 14, "failed": 3, "skipped": 3}
    assert tm._counts(tmp_path / "absent.xml") == dict.fromkeys(
        ("passed", "failed", "skipped"), 0
    )


def test_records_merge_by_version_in_version_order(tmp_path, monkeypatch):
    monkeypatch.setattr(tm, "REPO", tmp_path)
    out = tmp_path / "matrix.json"
    imports = {"base": {"imported": True}, "composed": {"imported": True}}
    counts = {"passed": 5, "failed": 0, "skipped": 0}
    for version in ("3.10.0", "3.2.0", "3.2.0"):
        tm._write(tm.record(version, imports, counts, None), out)
    runs = json.loads(out.read_text())["runs"]
    assert [r["triton"] for r in runs] == ["3.2.0", "3.10.0"]
    assert runs[0]["overlay_import"] and not runs[0]["cache_active"]
    assert (tmp_path / "build" / "triton_matrix" / "3.2.0.json").is_file()
