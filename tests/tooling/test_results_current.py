"""Every ``results/*.json`` is current: each ``op_commit`` it names is at or after the
last commit of the paths it says it measured (``measured_paths``, its own or the
nearest enclosing section's), so no figure of an older op can land silently.  A record
that measured no file of this repository says why in ``op_independent``.  A record
that ran PR files as they were (``pr_files``, upstream-ci's: test files too) holds
their sha256, which must be the files' now."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from copyfix import provenance, records

REPO = Path(__file__).resolve().parents[2]
RESULTS = sorted((REPO / "results").glob("*.json"))


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def sections(node, paths=None, where=""):
    """(where, section, measured_paths) of every dict of ``node``; a section's paths
    are its own, else the nearest enclosing ones."""
    if isinstance(node, dict):
        paths = node.get("measured_paths", paths)
        yield where or "/", node, paths
        for key, value in node.items():
            yield from sections(value, paths, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from sections(value, paths, f"{where}[{i}]")


def claims(node) -> list[tuple[str, str | None, list | None]]:
    """(where, op_commit, measured_paths) of every section of ``node`` naming an
    ``op_commit``."""
    return [
        (w, sec["op_commit"], p) for w, sec, p in sections(node) if "op_commit" in sec
    ]


def stale(commit: str | None, paths: list | None) -> str | None:
    """Why ``commit`` is not current for ``paths`` (None: it is)."""
    if not commit or not paths:
        return f"op_commit {commit!r} with measured_paths {paths!r}: nothing to hold"
    missing = [p for p in paths if not _git("ls-files", "--", p)]
    if missing:
        return f"measured_paths not in the tree: {missing}"
    try:
        _git("cat-file", "-e", f"{commit}^{{commit}}")
    except subprocess.CalledProcessError:
        return (
            f"op_commit {commit[:12]} is not in this repository's history "
            "(a shallow clone cannot tell: clone with the whole history)"
        )
    later = _git("log", "--format=%h %s", f"{commit}..HEAD", "--", *paths)
    return f"changed after {commit[:12]}:\n{later}" if later else None


def files_run(node) -> list[tuple[str, str, str]]:
    """(where, path, sha256) of every file a ``pr_files`` table of ``node`` ran."""
    return [
        (w, rel, info["sha256"])
        for w, sec, _ in sections(node)
        for rel, info in sec.get("pr_files", {}).items()
    ]


def changed(rel: str, sha: str) -> bool:
    path = REPO / rel
    return not path.is_file() or records.sha256(path) != sha


@pytest.mark.parametrize("path", RESULTS, ids=[p.name for p in RESULTS])
def test_every_file_run_is_the_file_now(path):
    ran = files_run(json.loads(path.read_text()))
    problems = [f"{w}: {rel}" for w, rel, sha in ran if changed(rel, sha)]
    assert not problems, f"{path.name} ran files since changed; re-run it:\n" + (
        "\n".join(problems)
    )


def test_a_file_run_then_changed_is_caught():
    rel = "tests/test_launch_cache.py"
    now = records.sha256(REPO / rel)
    record = {"bases": {"b": {"pr_files": {rel: {"sha256": now}}}}}
    assert files_run(record) == [("/bases/b", rel, now)]
    assert not changed(rel, now)
    assert changed(rel, "0" * 64) and changed("tests/no_such_file.py", now)


@pytest.mark.parametrize("path", RESULTS, ids=[p.name for p in RESULTS])
def test_every_figure_names_a_current_op(path):
    data = json.loads(path.read_text())
    found = claims(data)
    if not found:
        assert data.get("op_independent"), (
            f"{path.name} names no op_commit and no op_independent reason"
        )
        return
    problems = [f"{w}: {why}" for w, c, p in found if (why := stale(c, p))]
    assert not problems, f"{path.name} is stale; re-run it or remove it:\n" + "\n".join(
        problems
    )


def test_a_change_after_the_op_commit_is_caught():
    """The check itself: the commit before a measured file's last change is stale for
    it, the last change is current, and a record without paths cannot pass."""
    rel = "src/flag_gems/utils/launch_cache.py"
    last = provenance.op_commit(rel, env=None)
    assert stale(last, [rel]) is None
    assert "changed after" in stale(_git("rev-parse", f"{last}^"), [rel])
    assert stale(last, None) and stale(None, [rel])
    assert "not in the tree" in stale(last, ["src/no/such/file.py"])


def test_claims_take_the_nearest_paths():
    data = {"measured_paths": ["a"], "op_commit": "x",
            "bases": {"b": {"op_commit": "y"},
                      "c": {"op_commit": "z", "measured_paths": ["c"]}}}  # fmt: skip
    assert claims(data) == [("/", "x", ["a"]), ("/bases/b", "y", ["a"]),
                            ("/bases/c", "z", ["c"])]  # fmt: skip
