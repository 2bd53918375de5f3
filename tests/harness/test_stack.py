"""The stack's first PR on its own: base flag_gems with only PR 1's patch of the
KunlunXIN copy.py, in a fresh process under the cpu emulation and the XPU fault.

* PR 1's own tests (the ones it appends to upstream's tests/test_copy.py) pass on it
  and fail on the base, with the missing strided kernel's error;
* every layout x dtype pair of the KunlunXIN copy_ tests is bit-exact on it, or (the
  conversions it declines) reaches aten's missing strided copy as a strided source
  does on the base: never a wrong value, never a toolchain failure.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import flag_gems
from copyfix import compose, export

pytestmark = pytest.mark.harness

PR1 = export.PRS["strided-copy"]
OP = export.COPY_PY.removeprefix("src/flag_gems/")
HERE = Path(__file__).parent


def _tree(tmp_path, with_pr1: bool) -> Path:
    """The base flag_gems, with PR 1's patch of copy.py applied or not."""
    pkg = tmp_path / ("pr1" if with_pr1 else "base") / "flag_gems"
    strided = export.STRIDED_COPY_PY.removeprefix("src/flag_gems/")
    composed = Path(flag_gems.__file__).parent
    compose.decompose(composed, pkg, only=[OP, strided])
    if with_pr1:
        text = (pkg / OP).read_text()
        patch = PR1.patch_file(export.COPY_PY)
        (pkg / OP).write_text(compose.apply_patch(text, patch.read_text(), patch.name))
    return pkg.parent


def _run(tree: Path, *args) -> subprocess.CompletedProcess:
    path = [tree, export.REPO / "harness", export.REPO]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(map(str, path)))
    env["COPYFIX_EMULATION"] = "cpu"
    return subprocess.run(
        [sys.executable, *args],
        cwd=export.REPO,
        env=env,
        capture_output=True,
        text=True,
    )


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stack")
    return {flag: _tree(tmp, flag) for flag in (False, True)}


def test_pr1_passes_its_tests_and_the_base_fails_them(trees):
    cmd = [
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "tests/test_copy_additions.py",
    ]
    after = _run(trees[True], *cmd)
    assert after.returncode == 0, after.stdout[-3000:]
    assert "12 passed" in after.stdout
    before = _run(trees[False], *cmd)
    assert before.returncode == 1
    assert "invalid device function" in before.stdout
    failed = {
        line.split("::")[1].split(" ")[0]
        for line in before.stdout.splitlines()
        if line.startswith("FAILED")
    }
    # the seed's repro and the SDPA mask among them; the strided dst ran before PR 1
    seed = {
        f"test_copy_inplace_strided_src[{d}-{layout}]"
        for d in ("dst_dtype0", "dst_dtype1")
        for layout in ("expand", "sdpa_mask")
    }
    assert seed <= failed, failed


def _sweep(tree):
    done = _run(tree, str(HERE / "stack" / "pr1_sweep.py"))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# the conversions PR 1 declines (the native copy runs them: flat copies only)
DECLINED = {"fp32->bool", "i16->bool", "i32->bf16", "fp32->u8"}


def test_pr1_alone_never_gives_a_wrong_value(trees):
    before, after = _sweep(trees[False]), _sweep(trees[True])
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
