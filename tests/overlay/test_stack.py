"""The KunlunXIN PRs one at a time (base plus PRs 1..k, each in a fresh process under
the cpu emulation and the XPU fault): PR k's own tests fail on PRs 1..k-1 and pass on
1..k; PR 1 alone is bit-exact or reaches aten's strided copy, never a wrong value.
"""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import flag_gems
from copyfix import compose, export

pytestmark = pytest.mark.harness

HERE = Path(__file__).parent
KUNLUNXIN = ["strided-copy", "conversions", "python-scalar", "alias-snapshot"]
OPS = [export.COPY_PY, export.STRIDED_COPY_PY, export.PRS["conversions"].files[0]]


def _tree(root: Path, k: int) -> Path:
    """The base flag_gems with the KunlunXIN PRs 1 to k applied, under root."""
    pkg = root / f"upto{k}" / "flag_gems"
    composed = Path(flag_gems.__file__).parent
    compose.decompose(
        composed, pkg, only=[r.removeprefix("src/flag_gems/") for r in OPS]
    )
    op = pkg / export.COPY_PY.removeprefix("src/flag_gems/")
    op.write_text(export.main_shaped_copy(op.read_text()))  # (if 5.0.2's)
    for name in KUNLUNXIN[:k]:
        pr = export.PRS[name]
        for rel in OPS:
            dst = pkg / rel.removeprefix("src/flag_gems/")
            if rel in pr.files:
                dst.write_text((export.REPO / rel).read_text())
            elif rel in pr.patched:
                text = dst.read_text() if dst.is_file() else ""
                patch = pr.patch_file(rel)
                dst.write_text(compose.apply_patch(text, patch.read_text(), patch.name))
    return pkg.parent


def _run(tree: Path, *args, upto: int = 0) -> subprocess.CompletedProcess:
    path = [tree, export.REPO / "harness", export.REPO]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(map(str, path)))
    env.update(COPYFIX_EMULATION="cpu", COPYFIX_STACK_UPTO=str(upto))
    run = [sys.executable, *args]
    return subprocess.run(run, cwd=export.REPO, env=env, capture_output=True, text=True)


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stack")
    return [_tree(tmp, k) for k in range(len(KUNLUNXIN) + 1)]


GUARDS = {"test_copy_inplace_strided_dst", "test_copy_inplace_overlapping_dst_raises"}
GUARDS.add("test_copy_inplace_aliasing_dense_views")


def _own_tests(name: str) -> set:
    """The test functions PR ``name`` appends to tests/test_copy.py."""
    pr = export.PRS[name]
    lines = pr.patch_file("tests/test_copy.py").read_text().splitlines()
    code = "\n".join(x[1:] for x in lines if x.startswith("+") and x[:3] != "+++")
    return {
        node.name
        for node in ast.parse(code).body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    }


def _outcomes(done) -> dict:
    out = {}
    for line in done.stdout.splitlines():
        for word in ("PASSED", "FAILED"):
            if f" {word}" in line and "::" in line:
                test = line.split("::")[1].split(" ")[0].split("[")[0]
                out.setdefault(test, set()).add(word)
    return out


CMD = ["-m", "pytest", "-v", "-p", "no:cacheprovider", "tests/test_copy_additions.py"]


@pytest.mark.parametrize("k", range(1, len(KUNLUNXIN) + 1), ids=KUNLUNXIN)
def test_each_pr_fixes_its_own_cases(trees, k):
    own = _own_tests(KUNLUNXIN[k - 1])
    assert own
    after = _run(trees[k], *CMD, upto=k)
    assert after.returncode == 0, after.stdout[-3000:]
    before = _outcomes(_run(trees[k - 1], *CMD, upto=k))
    # every one of its tests fails, in every case, without it, but those that guard
    # what ran before it (a contiguous source, dense aliasing views)
    must_fail = own - GUARDS
    for test in must_fail:
        assert before[test] == {"FAILED"}, (test, before[test])
    if k == 1:
        assert "invalid device function" in _run(trees[0], *CMD, upto=1).stdout


# the conversions PR 1 declines (the native copy runs them: flat copies only)
DECLINED = {"fp32->bool", "i16->bool", "i32->bf16", "fp32->u8"}


def _sweep(tree):
    done = _run(tree, str(HERE / "stack" / "pr1_sweep.py"))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_pr1_alone_never_gives_a_wrong_value(trees):
    before, after = _sweep(trees[0]), _sweep(trees[1])
    assert set(before) == set(after)
    # no wrong value and no toolchain failure is left: what PR 1 declines runs where
    # it ran before for a strided source (aten: fails on the XPU), and aten now also
    # takes the broadcast and strided-destination copies the kernel converted wrongly
    assert not [k for k, v in after.items() if v in ("wrong", "toolchain")]
    assert {"wrong", "toolchain"} <= set(before.values())  # (the sweep can see them)
    kept = {k: v for k, v in after.items() if k.split(":")[1] not in DECLINED}
    assert set(kept.values()) == {"exact"}  # every other pair, every layout
    declined = {k: v for k, v in after.items() if k.split(":")[1] in DECLINED}
    assert set(declined.values()) == {"exact", "fault"}
    flat = [k for k, v in declined.items() if k.startswith("contiguous:")]
    assert all(declined[k] == "exact" for k in flat)
    fixed = [k for k in after if before[k] == "fault" and after[k] == "exact"]
    assert len(fixed) >= 6 * 14  # six strided-source layouts x the kept pairs
    # and the whole stack runs every case exactly
    assert set(_sweep(trees[-1]).values()) == {"exact"}
