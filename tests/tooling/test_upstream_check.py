"""`make upstream-check` against a synthetic FlagGems checkout: the 5.0.2 base the build
kept, a conftest with upstream v5.0.2's xdist flaw (TEST_RESULTS filled on workers,
indexed on the controller) and a few tests with known fates under the XPU fault."""

import json
import re
import subprocess

import pytest
import tomllib
import yaml

from copyfix import export, lint
from copyfix.upstream import check as upstream_check

pytestmark = pytest.mark.harness

CONFTEST = """\
import pytest

import flag_gems  # noqa: F401  (upstream's conftest imports it too)

TEST_RESULTS = {}


def pytest_addoption(parser):
    parser.addoption("--quick", action="store_true")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    TEST_RESULTS[item.nodeid] = {"params": None, "result": None, "opname": None}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report):
    if report.when == "call":
        TEST_RESULTS[report.nodeid]["result"] = report.outcome  # KeyError on an xdist controller
"""

TESTS = """\
import pytest
import torch

import flag_gems


def _src(*shape):
    return torch.arange(torch.Size(shape).numel(), dtype=torch.float32).reshape(shape)


@pytest.mark.parametrize("n", [3, 4, 5])
def test_contiguous(n):
    src, dst = _src(n, 4), torch.empty(n, 4)
    with flag_gems.use_gems():
        dst.copy_(src)
    assert torch.equal(dst, src)


def test_transposed():
    src, dst = _src(4, 3).t(), torch.empty(3, 4)
    with flag_gems.use_gems():
        dst.copy_(src)
    assert torch.equal(dst, src)


def test_no_copy():
    assert torch.equal(_src(2, 2) + 0, _src(2, 2))


def test_needs_cuda():
    dst = torch.empty(2, 2)
    with flag_gems.use_gems():
        dst.copy_(_src(2, 2))
    raise AssertionError("Torch not compiled with CUDA enabled")


def test_skips():
    dst = torch.empty(2, 2)
    with flag_gems.use_gems():
        dst.copy_(_src(2, 2))
    pytest.skip("not on this device")
"""


@pytest.fixture(scope="module")
def checkout(base_checkout):
    (base_checkout / "tests" / "conftest.py").write_text(CONFTEST)
    (base_checkout / "tests" / "test_synthetic.py").write_text(TESTS)
    return base_checkout


@pytest.fixture(scope="module")
def discovered(checkout, tmp_path_factory):
    out = tmp_path_factory.mktemp("sel") / "selection.json"
    args = ["discover", str(checkout), "--label", "synthetic", "-n", "0", "--out"]
    assert upstream_check.main([*args, str(out)]) == 0
    return json.loads(out.read_text())


def test_discover_selects_the_cases_that_call_copy(discovered):
    cases = discovered["cases"]
    names = sorted(n.split("::", 1)[1] for n in cases)
    # the scan ran test_contiguous[3] only; its other cases were then run in full
    assert discovered["scan"]["cases"] == 5
    contiguous = [f"test_contiguous[{n}]" for n in (3, 4, 5)]
    assert names == [*contiguous, "test_needs_cuda", "test_skips", "test_transposed"]
    assert all(c["copy_calls"] >= 1 for c in cases.values())
    # fault off: the base copies the transposed source through aten and passes
    assert cases["tests/test_synthetic.py::test_transposed"]["outcome"] == "passed"


def test_check_classifies_base_vs_overlay_under_xdist(checkout, discovered, tmp_path):
    sel = tmp_path / "selection.json"
    sel.write_text(json.dumps(discovered))
    results = tmp_path / "upstream_check_cpu.json"
    before = sorted(p.name for p in checkout.rglob("*"))
    # -n 1, xdist (one worker): upstream's conftest flaw would abort the controller
    args = ["check", str(checkout), "--label", "synthetic", "-n", "1", "--no-docs"]
    args += ["--selection", str(sel), "--results", str(results)]
    assert upstream_check.main(args) == 0
    assert sorted(p.name for p in checkout.rglob("*")) == before, "checkout untouched"
    data = json.loads(results.read_text())
    sec = data["bases"]["synthetic"]
    by_name = {c["nodeid"].split("::", 1)[1]: c for c in sec["cases"]}
    assert by_name["test_transposed"]["class"] == "fixed"
    assert by_name["test_transposed"]["reason_class"] == "xpu-fault"
    assert "invalid device function" in by_name["test_transposed"]["base"]["reason"]
    assert by_name["test_needs_cuda"]["class"] == "fail_both"
    assert by_name["test_needs_cuda"]["reason_class"] == "emulation-limit"
    assert by_name["test_skips"]["class"] == "skipped"
    for n in (3, 4, 5):
        assert by_name[f"test_contiguous[{n}]"]["class"] == "pass_both"
    assert all(c["overlay"]["copy_calls"] >= 1 for c in sec["cases"])
    counts = dict(fixed=1, regressed=0, pass_both=3, fail_both=1, skipped=1, cases=6)
    assert data["summary"] == {**counts, "bases": ["synthetic"]}
    assert sec["summary"]["fail_both_reasons"] == {"emulation-limit": 1}


def test_classify_reasons():
    classify = upstream_check.classify
    ok = {"outcome": "passed", "reason": None, "copy_calls": 1}

    def fail(reason):
        return {"outcome": "failed", "reason": reason, "copy_calls": 1}

    fault = "torch.AcceleratorError: CUDA error: invalid device function"
    assert classify(fail(fault), ok)["class"] == "fixed"
    assert classify(ok, fail("AssertionError: x"))["class"] == "regressed"
    both = classify(fail("ValueError: 3 != 4"), fail("ValueError: 5 != 6"))
    assert both == {"class": "fail_both", "reason_class": "same-failure"}
    both = classify(fail("ValueError: a"), fail("TypeError: b"))
    assert both["reason_class"] == "different-failure"
    both = classify(fail(fault), fail(fault))
    assert both["reason_class"] == "xpu-fault"
    numel = "ValueError: numel (2097152) exceeds triton maximum tensor numel (1048576)"
    assert upstream_check.reason_class(numel) == "emulation-limit"
    assert classify(None, ok)["class"] == "fixed"  # missing = failure


def test_limit_takes_every_file_in_turn():
    ids = [f"tests/test_a.py::t[{i}]" for i in range(5)] + ["tests/test_b.py::u"]
    picked = upstream_check.limit_round_robin(ids, 3)
    assert len(picked) == 3 and "tests/test_b.py::u" in picked
    assert upstream_check.limit_round_robin(ids, None) == sorted(ids)


def _section(label, fixed):
    case = {"nodeid": "tests/test_a.py::t", "class": "fixed" if fixed else "pass_both"}
    case["reason_class"] = "xpu-fault" if fixed else None
    case["base"] = dict(
        outcome="failed", copy_calls=1, reason="invalid device function"
    )
    case["overlay"] = {"outcome": "passed", "copy_calls": 1}
    summary = upstream_check.summarise([case])
    meta = dict(date="d", machine="m", versions={}, jobs=2, quick=True, limit=None)
    meta.update(selected=1, selection_size=1, files=["tests/test_a.py"], wall_s=1.0)
    meta["run_wall_s"] = {"base": 0.5, "overlay": 0.5}
    return {"summary": summary, "meta": meta, "cases": [case]}


def test_results_keep_other_bases_and_docs_are_generated(tmp_path, monkeypatch):
    monkeypatch.setattr(upstream_check, "RESULTS", tmp_path)
    monkeypatch.setattr(upstream_check, "DOCS", tmp_path / "UPSTREAM_CHECK.md")
    path = tmp_path / "upstream_check_cpu.json"
    upstream_check.write_results(path, "v5.0.2", _section("v5.0.2", True))
    upstream_check.write_results(path, "main", _section("main", False))
    data = json.loads(path.read_text())
    assert sorted(data["bases"]) == ["main", "v5.0.2"]
    assert data["summary"]["fixed"] == 1 and data["summary"]["pass_both"] == 1
    doc = upstream_check.write_docs().read_text()
    assert "## v5.0.2, cpu mode" in doc and "## main, cpu mode" in doc
    assert "note." not in doc
    path.write_text(json.dumps(dict(data, note="why these cases fail")))
    doc = upstream_check.write_docs().read_text()
    assert "**cpu mode, note.** why these cases fail" in doc
    assert "`tests/test_a.py::t`: xpu-fault" in doc


def test_pre_commit_config_uses_local_hooks_and_upstream_settings():
    config = yaml.safe_load((export.REPO / ".pre-commit-config.yaml").read_text())
    hooks = {h["id"]: h for repo in config["repos"] for h in repo["hooks"]}
    assert [r["repo"] for r in config["repos"]] == ["local"]  # nothing to clone
    for hook in hooks.values():
        assert hook["language"] == "python"
        assert all("==" in d for d in hook["additional_dependencies"])
    flake8 = hooks["upstream-flake8"]["entry"].split()[1:]
    assert sorted(flake8) == sorted(lint.FLAKE8_ARGS)
    tracked = subprocess.run(
        ["git", "-C", str(export.REPO), "ls-files"], capture_output=True, text=True
    ).stdout.split()
    pr_py = {f for pr in export.PRS.values() for f in pr.files if f.endswith(".py")}
    for hook_id in ("upstream-black", "upstream-isort", "upstream-flake8"):
        pattern = re.compile(hooks[hook_id]["files"])
        assert {f for f in tracked if pattern.search(f)} == pr_py  # lint.py's files
    project = tomllib.loads((export.REPO / "pyproject.toml").read_text())["project"]
    pins = {d.split("==")[0]: d for d in project["optional-dependencies"]["dev"]}
    deps = [d for hook in hooks.values() for d in hook["additional_dependencies"]]
    assert all(pins[d.split("==")[0]] == d for d in deps), "pins match the dev extras"
