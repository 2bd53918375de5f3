"""`make upstream-ci`: upstream's per-PR CI script over a synthetic FlagGems checkout
(conftest's ``base_checkout`` plus the files below; tools/test-op.sh is upstream's own
when /tmp/fg, a FlagGems main checkout, exists, else TEST_OP_EQUIVALENT)."""

import json
import shutil
import tempfile
from pathlib import Path

import pytest

from copyfix import emulation, export
from copyfix.upstream import check as upstream_check
from copyfix.upstream import ci as upstream_ci

pytestmark = pytest.mark.harness

UPSTREAM_MAIN = Path("/tmp/fg")

CONFTEST = """\
def pytest_addoption(parser):
    parser.addoption("--ref", action="store", default="device")
    parser.addoption("--quick", action="store_true")
"""

TEST_COPY = "import torch\n\nimport flag_gems\n" + "".join(
    f"""

def test_{name}():
    src, dst = torch.arange(12.0).reshape({src}), torch.empty(3, 4)
    with flag_gems.use_gems():
        dst.copy_(src)
    assert torch.equal(dst, src)
"""
    for name, src in (("contiguous", "3, 4"), ("transposed", "4, 3).t("))
)

# the tiny PR's test file: test-op.sh runs it with -x, so it stops at the failure
PR_TEST = """\
import pytest
import torch

import flag_gems


def test_a_strided_copy():
    src, dst = torch.arange(6.0).reshape(2, 3).t(), torch.empty(3, 2)
    with flag_gems.use_gems():
        dst.copy_(src)
    assert torch.equal(dst, src)


def test_b_skips():
    pytest.skip("not here")


def test_c_fails():
    raise AssertionError("deliberate")


def test_d_never_runs():
    pass
"""

# Used only where /tmp/fg is absent (CI): the contract of upstream's tools/test-op.sh
# for one changed file, in this repository's words.
TEST_OP_EQUIVALENT = """\
#!/bin/bash
echo "PR_ID=$1"
for f in $CHANGED_FILES; do
  case $f in
    tests/test*.py)
      coverage run -m pytest -s -x "$f" || exit 1
      coverage run -m pytest -s -x "$f" --ref=cpu --quick || exit 1
      ;;
    benchmark/test*)
      pytest -s "$f" --level core --record log || exit 1
      ;;
  esac
done
"""

PR_TEST_FILE = "tests/test_tiny_pr.py"


@pytest.fixture(scope="module")
def checkout(base_checkout):
    root = base_checkout
    (root / "tests" / "conftest.py").write_text(CONFTEST)
    (root / "tests" / "test_copy.py").write_text(TEST_COPY)
    (root / "benchmark").mkdir()
    (root / "tools").mkdir()
    upstream = UPSTREAM_MAIN / upstream_ci.TEST_OP
    script = upstream.read_text() if upstream.is_file() else TEST_OP_EQUIVALENT
    (root / upstream_ci.TEST_OP).write_text(script)
    return root


@pytest.fixture
def tiny_pr(tmp_path, monkeypatch):
    """A PR 'tiny': our copy.py (and the strided copy it calls) plus a small test
    file, from a stand-in repository."""
    repo = tmp_path / "repo"
    (repo / PR_TEST_FILE).parent.mkdir(parents=True)
    (repo / PR_TEST_FILE).write_text(PR_TEST)
    (repo / export.COPY_PY).parent.mkdir(parents=True)
    op_files = [export.COPY_PY, export.STRIDED_COPY_PY]
    for rel in (*op_files, "pyproject.toml"):
        shutil.copyfile(export.REPO / rel, repo / rel)
    pr = export.PR("tiny", [*op_files, PR_TEST_FILE], "b", "m")
    monkeypatch.setattr(export, "REPO", repo)
    monkeypatch.setattr(export, "PRS", {"tiny": pr})
    return pr


@pytest.fixture
def own_tmp(tmp_path, monkeypatch):
    folder = tmp_path / "tmpdir"  # tempfile's: what the tool leaves there is visible
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _snapshot(root: Path) -> dict:
    return {
        str(p.relative_to(root)): (p.stat().st_mtime_ns, p.stat().st_size)
        for p in sorted(root.rglob("*"))
    }


def test_end_to_end_cpu_mode(checkout, tiny_pr, own_tmp, tmp_path, capsys):
    results = tmp_path / "upstream_ci_cpu.json"
    other = {"base": "other", "mode": "cpu", "machine": "m", "op_commit": "c"}
    results.write_text(json.dumps({"bases": {"other": other}}))
    before = _snapshot(checkout)
    args = "--mode cpu --label synthetic --test-copy quick --no-docs".split()
    args += ["--results", str(results), "--machine", "test box"]
    assert upstream_ci.main([str(checkout), *args]) == 0
    assert _snapshot(checkout) == before, "the checkout is not touched"
    assert list(own_tmp.iterdir()) == [], "the temporary copies are removed"
    data = json.loads(results.read_text())
    assert sorted(data["bases"]) == ["other", "synthetic"], "other bases are kept"
    assert data["mode"] == "cpu" and data["machine"] == "test box"
    sec = data["bases"]["synthetic"]
    assert sec["base"] == "synthetic" and sec["op_commit"] == data["op_commit"]
    assert sec["versions"]["flag_gems"] == emulation.flag_gems_base()  # the base in use
    assert sec["versions"]["coverage"]
    op, strided, tests = sec["invocations"]
    # the op files: test-op.sh runs nothing for them, and that is what is recorded
    for rec, rel in ((op, export.COPY_PY), (strided, export.STRIDED_COPY_PY)):
        assert rec["file"] == rel and rec["rc"] == 0
        assert rec["pytest_runs"] == [] and rec["passed"] == 0
        assert "ran no pytest" in rec["note"]
        assert f"CHANGED_FILES={rel} " in rec["command"]
    # the test file: one run, stopped by -x at the deliberate failure, exit 1
    assert tests["rc"] == 1 and f"CHANGED_FILES={PR_TEST_FILE} " in tests["command"]
    (run,) = tests["pytest_runs"]
    assert run["command"] == f"coverage run -m pytest -s -x {PR_TEST_FILE}"
    assert (run["passed"], run["failed"], run["skipped"]) == (1, 1, 1)
    assert (tests["passed"], tests["failed"], tests["skipped"]) == (1, 1, 1)
    failure = dict(nodeid=f"{PR_TEST_FILE}::test_c_fails", outcome="failed")
    failure.update(reason="AssertionError: deliberate", reason_class="assertion")
    assert run["failures"] == [failure]
    assert tests["imported"]["flag_gems"] == "<copy>/src/flag_gems"
    assert "deliberate" in tests["log_tail"] and len(tests["log_tail"]) <= 1500
    # upstream-style test_copy.py: the base's fallback meets the fault, the PR passes
    tc = sec["test_copy"]
    (without,), (with_pr,) = tc["without_pr"], tc["with_pr"]
    quick = "pytest -s tests/test_copy.py --ref=cpu --quick"
    assert without["command"] == quick == with_pr["command"]
    assert (without["passed"], without["failed"]) == (1, 1)
    (fault,) = without["failures"]
    assert fault["nodeid"] == "tests/test_copy.py::test_transposed"
    assert fault["reason_class"] == "xpu-fault"
    assert "invalid device function" in fault["reason"]
    assert (with_pr["passed"], with_pr["failed"], with_pr["rc"]) == (2, 0, 0)
    assert with_pr["pr"] == "tiny" and with_pr["copy_calls"] >= 2
    out = capsys.readouterr().out
    assert f"upstream-ci synthetic tiny {PR_TEST_FILE}: rc 1" in out


def _fake_checkout(root: Path, *, test_op=True, copy_py: str | None = None) -> Path:
    files = {"src/flag_gems/__init__.py": "", "tests/conftest.py": ""}
    if test_op:
        files[upstream_ci.TEST_OP] = "#!/bin/bash\nexit 0\n"
    if copy_py is not None:
        files[export.COPY_PY] = copy_py
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _bad_input(tmp_path, own_tmp, capsys, checkout, *extra) -> str:
    results = tmp_path / "results.json"
    results.write_text('{"bases": {}}\n')
    with pytest.raises(SystemExit) as err:
        upstream_ci.main([str(checkout), "--results", str(results), *extra])
    assert err.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("upstream-ci: ")
    assert results.read_text() == '{"bases": {}}\n', "results untouched"
    assert list(own_tmp.iterdir()) == [], "nothing left in the temporary folder"
    return lines[0]


def _bad_checkout(tmp_path, case) -> tuple[Path, list[str]]:
    if case in ("missing", "empty"):
        (tmp_path / "empty").mkdir()
        return tmp_path / case, []
    if case == "no test-op":
        return _fake_checkout(tmp_path / "fg", test_op=False), []
    if case == "later copy.py":
        later = "# a later upstream copy.py\n"
        return _fake_checkout(tmp_path / "fg", copy_py=later), ["--pr", "strided-copy"]
    root = _fake_checkout(tmp_path / "fg", copy_py=export.base_copy_text())
    if case == "unknown base":
        # a known pre-image (the where PR's), but no base the emulation knows
        import flag_gems

        kept = Path(flag_gems.__file__).parent / "_overlay_preimages/ops/where.py"
        (root / "src/flag_gems/ops").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(kept, root / "src/flag_gems/ops/where.py")
        return root, ["--pr", "where"]
    return root, ["--pr", "nope"]


@pytest.mark.parametrize(
    "case, said",
    [
        ("missing", "no such checkout: "),
        ("empty", "is not a FlagGems checkout (no src/flag_gems/__init__.py)"),
        ("no test-op", "has no tools/test-op.sh"),
        ("later copy.py", "refusing strided-copy PR"),
        ("unknown PR", "unknown PR nope"),
        ("unknown base", "copyfix.emulation does not know the FlagGems base"),
    ],
)
def test_bad_input(case, said, tmp_path, own_tmp, capsys):
    checkout, extra = _bad_checkout(tmp_path, case)
    assert said in _bad_input(tmp_path, own_tmp, capsys, checkout, *extra)


BLOCKED = (
    "This is not allowed since there's already a kernel registered from python "
    "overriding copy_'s behavior for CUDA dispatch key"
)
TRACED_LOG = """\
+ PR_ID=kunlunxin
+ echo PR_ID=kunlunxin
PR_ID=kunlunxin
+ coverage erase
+ for item in "${TEST_CASES[@]}"
+ echo 'Running unit tests for tests/test_x.py'
Running unit tests for tests/test_x.py
+ coverage run -m pytest -s -x tests/test_x.py
============================= test session starts ==============================
tests/test_x.py ..s.
{WARNING}{WARNING}=========================== short test summary info ============================
FAILED tests/test_x.py::test_y[a|b] - torch.AcceleratorError: CUDA error: invalid device function
======== 1 failed, 3 passed, 1 skipped, 2 warnings in 12.50s =========
+ for item in "${TEST_CASES_CPU[@]}"
+ coverage run -m pytest -s -x tests/test_x.py --ref=cpu --quick
ERROR: usage: __main__.py [options] [file_or_dir] [file_or_dir] [...]
+ for item in "${PERF_TEST_CASES[@]}"
+ pytest -s benchmark/test_x.py --level core --record log
============================= no tests ran in 0.01s ============================
""".replace(
    "{WARNING}", f"WARNING  root:error.py:30 Skipped registering operator: {BLOCKED}\n"
)


def test_split_runs_matches_each_traced_pytest_command_with_its_counts():
    runs = upstream_ci.split_runs(TRACED_LOG)
    assert [r["command"] for r in runs] == [
        "coverage run -m pytest -s -x tests/test_x.py",
        "coverage run -m pytest -s -x tests/test_x.py --ref=cpu --quick",
        "pytest -s benchmark/test_x.py --level core --record log",
    ]
    first, usage, bench = runs
    assert (first["passed"], first["failed"], first["skipped"]) == (3, 1, 1)
    assert first["pytest_seconds"] == 12.5
    assert first["failures"][0]["nodeid"] == "tests/test_x.py::test_y[a|b]"
    assert first["failures"][0]["reason_class"] == "xpu-fault"
    # FlagGems' swallowed registration error, once: its copy_ never ran in that session
    (blocked,) = first["registration_errors"]
    assert "overriding copy_'s behavior for CUDA" in blocked
    assert usage["registration_errors"] == []
    assert usage["summary"] is None and "usage" in usage["last_lines"]
    assert (usage["passed"], usage["failed"]) == (0, 0)
    assert bench["summary"] == "no tests ran in 0.01s" and bench["passed"] == 0
    assert upstream_ci.sum_runs(runs) == dict(passed=3, failed=1, skipped=1, errors=0)
    assert upstream_ci.split_runs("+ coverage erase\nPR_ID=1\n") == []
    # (upstream's benchmark timers, which the interpreter lacks: this tool's own class)
    bench = "Failed: 'InterpreterDriver' object has no attribute 'get_device_interface'"
    assert upstream_ci.reason_class(bench) == "emulation-limit"


def _inv(pr, file, rc=0, seconds=0.0, runs=()):
    return dict(pr=pr, file=file, rc=rc, seconds=seconds, pytest_runs=[*runs])


def _test_copy(pr=None, **more):
    rec = dict(pr=pr, command="pytest -s tests/test_copy.py", rc=1, passed=4, failed=2)
    return dict(rec, skipped=0, seconds=2.0, failure_classes={"xpu-fault": 2}, **more)


def _section(label, commit="abc1234", date="d", **more):
    run = {"command": "coverage run -m pytest -s -x tests/test_copy_ops.py"}
    run.update(passed=3, failed=1, skipped=0, summary="1 failed, 3 passed in 1s")
    run["failures"] = [
        dict(nodeid="tests/test_copy_ops.py::t", reason_class="assertion")
    ]
    sec = dict(base=label, date=date, mode="cpu", machine="m", op_commit=commit)
    sec.update(versions={"torch": "t", "triton": "r", "coverage": "c"}, wall_s=1.0)
    sec["invocations"] = [
        _inv("kunlunxin", export.COPY_PY),
        _inv("kunlunxin", "tests/test_copy_ops.py", 1, 5.0, [run]),
    ]
    sec["test_copy"] = {"without_pr": [_test_copy()], "with_pr": []}
    return {**sec, **more}


def _generic_only(label, commit):
    generic = "src/flag_gems/ops/copy.py"
    sec = _section(label, commit, "later", prs={"generic": [generic]})
    sec["pr_files"] = {generic: {"sha256": "g"}}
    sec["invocations"] = [_inv("generic", generic)]
    sec["test_copy"]["with_pr"] = [_test_copy("generic", rc=0, failed=0)]
    return sec


def test_a_run_of_one_pr_keeps_the_other_prs_records_with_their_run(tmp_path):
    path = tmp_path / "upstream_ci_cuda.json"
    old = _section("main", "old1234")
    old["prs"] = {"kunlunxin": [export.COPY_PY, "tests/test_copy_ops.py"]}
    old["pr_files"] = {export.COPY_PY: {"sha256": "k"}, "tests/x.py": {"sha256": "x"}}
    old["test_copy"]["with_pr"] = [_test_copy("kunlunxin", passed=9)]
    upstream_ci.write_results(path, "main", old)
    data = upstream_ci.write_results(path, "main", _generic_only("main", "new5678"))
    sec = data["bases"]["main"]
    assert list(sec["prs"]) == ["kunlunxin", "generic"]
    assert sec["op_commit"] == "new5678" and sec["date"] == "later"
    kept = ("kunlunxin", {"date": "d", "op_commit": "old1234"})
    got = [(i["pr"], i.get("run")) for i in sec["invocations"]]
    assert got == [kept, kept, ("generic", None)]
    assert sec["pr_files"] == {
        export.COPY_PY: {"sha256": "k"},
        "src/flag_gems/ops/copy.py": {"sha256": "g"},
    }, "a kept PR's files stay, a dropped entry is not invented"
    with_pr = sec["test_copy"]["with_pr"]
    got = [(r["pr"], r["passed"], "run" in r) for r in with_pr]
    assert got == [("kunlunxin", 9, True), ("generic", 4, False)]
    assert sec["test_copy"]["without_pr"][0].get("run") is None  # the new run's
    # a second run of the same PR replaces its records; the carried stamp is kept
    data = upstream_ci.write_results(path, "main", _generic_only("main", "newer"))
    invocations = data["bases"]["main"]["invocations"]
    got = [i.get("run", {}).get("op_commit") for i in invocations]
    assert got == ["old1234", "old1234", None]
    block = upstream_ci.render_block(tmp_path)
    assert "| kunlunxin (run d, op `old1234`) | `tests/test_copy_ops.py` |" in block
    assert "| with kunlunxin (run d, op `old1234`) |" in block
    assert "| with generic |" in block
    # a run of every PR replaces the section whole
    every = _section("main", "all", prs={"kunlunxin": [], "generic": []})
    full = upstream_ci.write_results(path, "main", every)
    assert all("run" not in i for i in full["bases"]["main"]["invocations"])


def test_docs_block_is_replaced_and_kept_by_upstream_check(tmp_path, monkeypatch):
    results = tmp_path / "results"
    results.mkdir()
    path = results / "upstream_ci_cpu.json"
    upstream_ci.write_results(path, "v5.0.2", _section("v5.0.2"))
    doc = tmp_path / "UPSTREAM_CHECK.md"
    doc.write_text("# generated\n\nbody\n")
    upstream_ci.write_docs(doc, results)
    upstream_ci.write_docs(doc, results)  # replaced, not appended twice
    text = doc.read_text()
    assert text.startswith("# generated\n\nbody\n\n<!-- upstream-ci -->\n")
    assert text.count("<!-- upstream-ci -->") == 1
    assert text.endswith("<!-- /upstream-ci -->\n")
    assert "### v5.0.2, cpu mode" in text
    assert f"| kunlunxin | `{export.COPY_PY}` | nothing" in text
    run = "`coverage run -m pytest -s -x tests/test_copy_ops.py`: `t` (assertion)"
    assert f"{run} | 1 | 3 | 1 | 0 | 5.0 in all |" in text
    tc = "| without PR | `pytest -s tests/test_copy.py` | 1 | 4 | 2 | 0 | xpu-fault 2 | 2.0 |"
    assert tc in text
    assert "could not register" not in text
    sec = _section("main")
    sec["test_copy"]["without_pr"][0]["registration_errors"] = [BLOCKED]
    upstream_ci.write_results(results / "upstream_ci_cuda.json", "main", sec)
    said = "**FlagGems could not register `copy_`** in 1 of these pytest runs"
    assert said in upstream_ci.render_block(results)
    # upstream-check regenerates the file and keeps the block as it is
    block = text[text.index("<!-- upstream-ci -->") :]
    monkeypatch.setattr(upstream_check, "RESULTS", tmp_path / "none")
    monkeypatch.setattr(upstream_check, "DOCS", doc)
    upstream_check.write_docs()
    again = doc.read_text()
    assert again.startswith(upstream_check.DOC_INTRO) and again.endswith(block)
    assert "body" not in again


def test_records_a_run_did_not_reach_keep_their_earlier_result(tmp_path):
    path = tmp_path / "upstream_ci_cuda.json"
    old = _section("main", "old1234")
    upstream_ci.write_results(path, "main", old)
    new = _section("main", "new5678", "later")
    skipped = {"rc": None, "note": upstream_ci.NOT_RUN, "passed": 0, "failed": 0}
    new["invocations"][1] = dict(new["invocations"][1], **skipped)
    killed = {"rc": 124, "timed_out": True, "passed": 0, "failed": 0, "errors": 0}
    new["test_copy"]["without_pr"][0].update(killed)
    new["invocations"][0] = dict(new["invocations"][0], rc=3)  # (a result: replaces)
    sec = upstream_ci.write_results(path, "main", new)["bases"]["main"]
    first, second = sec["invocations"]
    assert first["rc"] == 3 and "run" not in first, "the new run's own result"
    assert second["rc"] == 1
    assert second["pytest_runs"] == old["invocations"][1]["pytest_runs"]
    assert second["run"] == {"date": "d", "op_commit": "old1234"}
    assert upstream_ci.NOT_RUN in second["carried_because"]
    (tc,) = sec["test_copy"]["without_pr"]
    assert tc["rc"] == 1 and tc["run"]["date"] == "d"
    assert "rc 124" in tc["carried_because"]
    # a killed run that had results is a result; an unreached one with no earlier
    # record stays as it is
    partial = dict(killed, passed=2)
    newer = _section("main", "newer", "latest")
    newer["test_copy"]["without_pr"][0].update(partial)
    newer["invocations"].append(dict(newer["invocations"][0], file="x.py", **skipped))
    sec = upstream_ci.write_results(path, "main", newer)["bases"]["main"]
    assert sec["test_copy"]["without_pr"][0]["passed"] == 2
    assert sec["test_copy"]["without_pr"][0].get("run") is None
    assert sec["invocations"][-1]["rc"] is None and "run" not in sec["invocations"][-1]


def test_a_run_without_test_copy_keeps_the_bases_test_copy_records(tmp_path):
    path = tmp_path / "upstream_ci_cuda.json"
    old = _section("main", "old1234", prs={"kunlunxin": [], "generic": []})
    old["test_copy"]["with_pr"] = [_test_copy("kunlunxin", passed=9)]
    old["test_copy"]["with_pr"].append(_test_copy("generic", passed=7))
    upstream_ci.write_results(path, "main", old)
    new = _generic_only("main", "new5678")
    new["test_copy"] = {"which": "none", "without_pr": [], "with_pr": []}
    tc = upstream_ci.write_results(path, "main", new)["bases"]["main"]["test_copy"]
    got = [(r["pr"], r["passed"], r["run"]["op_commit"]) for r in tc["with_pr"]]
    assert got == [("kunlunxin", 9, "old1234"), ("generic", 7, "old1234")]
    assert [r["run"]["op_commit"] for r in tc["without_pr"]] == ["old1234"]
    block = upstream_ci.render_block(tmp_path)
    assert "| without PR (run d, op `old1234`) |" in block


def test_the_top_names_the_paths_its_op_commit_is_held_against(tmp_path):
    # (tests/tooling/test_results_current.py holds every op_commit against the nearest
    # measured_paths: the top's op_commit needs its own)
    path = tmp_path / "upstream_ci_cpu.json"
    paths = [export.COPY_PY]
    data = upstream_ci.write_results(
        path, "main", _section("main", measured_paths=paths)
    )
    assert data["op_commit"] == "abc1234" and data["measured_paths"] == paths
