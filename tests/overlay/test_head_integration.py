"""PR 1 on upstream's head KunlunXIN copy.py (the tle_copy era): FlagGems main with
upstream's later files (.upstream/later/, sha256 checked, never committed), the named
adaptation, and PR 1 applied by export.apply_pr (copy.py.head.patch); PR 1's own tests
then run on it in cpu mode.  The two tests needing the later files are marked
head_tree (deselected by ``make test``, run by ``make test-head``).
"""

import ast
import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from copyfix import compose, export
from copyfix.upstream import later

pytestmark = pytest.mark.harness

HEAD_PATCH = export.REPO / f"{export.COPY_PY}.head.patch"
# The PRs applied to the head tree, each as patches of the head files it edits (PR 1,
# PR 2, PR 4; PR 3's pointwise_dynamic files have no later version here), and their
# PR tests
# the stack's tops applied (each with the PRs it needs), and the tests run on it
HEAD_PRS = ("alias-snapshot", "generic")
HEAD_TESTS = {
    "kunlunxin_copy": ["tests/test_copy_ops.py", "tests/test_copy_additions.py"],
    "generic": ["tests/test_copy_dtype_conversions.py"],
    "kunlunxin_to_copy": ["tests/test_to_copy_conversions.py"],
}
HEAD_PATCHED = {  # tree path -> the later file its .head.patch edits
    export.COPY_PY: "copy.py",
    "src/flag_gems/ops/copy.py": "ops_copy.py",
    "src/flag_gems/ops/to.py": "ops_to.py",
    "src/flag_gems/runtime/backend/_kunlunxin/ops/to.py": "kunlunxin_to_head.py",
}
LATER = export.REPO / ".upstream" / "later"
MAIN_GIT = Path(
    os.environ.get("COPYFIX_MAIN_GIT", "/work/.mirror/flagos-ai+FlagGems/repo")
)


def _later_files_or_skip():
    for name, (_, source, cited) in later.LATER_FILES.items():
        path = LATER / name
        if not path.is_file():
            pytest.skip(
                f"{path} absent (upstream's head file, never committed; CI cannot fetch "
                f"it): read it as {source}"
            )
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        assert digest == cited, f"{path}: sha256 {digest}, not the cited {cited}"


@pytest.fixture(scope="module")
def head_tree(tmp_path_factory):
    _later_files_or_skip()
    import flag_gems
    from copyfix import emulation

    root = tmp_path_factory.mktemp("head") / "FlagGems"
    if emulation.flag_gems_base() == "main-2026-08-21":
        compose.decompose(Path(flag_gems.__file__).parent, root / "src" / "flag_gems")
    elif MAIN_GIT.is_dir():
        root.mkdir()
        archive = subprocess.run(
            ["git", "--git-dir", str(MAIN_GIT), "archive", "HEAD", "src"],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    else:
        pytest.skip(f"no FlagGems main here (base in use: 5.0.2; {MAIN_GIT} absent)")
    for name, (upstream_path, _, _) in later.LATER_FILES.items():
        (root / upstream_path).write_bytes((LATER / name).read_bytes())
    later.adapt(root)
    for pr in HEAD_PRS:
        export.apply_stack(root, pr)
    return root


def _env(tree):
    env = dict(os.environ, COPYFIX_EMULATION="cpu")
    env.pop("PYTEST_XDIST_WORKER", None)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(tree / "src"), str(export.REPO / "harness")]
    )
    return env


@pytest.mark.head_tree
def test_head_tree_holds_the_patched_head_files(head_tree):
    for rel, name in HEAD_PATCHED.items():
        patch = compose.head_patch(export.REPO / rel).read_text()
        pre = (LATER / name).read_text()
        assert (head_tree / rel).read_text() == compose.apply_patch(pre, patch, name)
    text = (head_tree / export.COPY_PY).read_text()
    assert "tle_copy(expanded_src, dst)" in text  # tle_copy stays first
    assert (head_tree / export.STRIDED_COPY_PY).read_bytes() == (
        export.REPO / export.STRIDED_COPY_PY
    ).read_bytes()
    code = (
        "from copyfix import emulation; emulation.activate(); import sys, flag_gems; "
        "m = sys.modules['_kunlunxin.ops.copy']; print(m.__file__); "
        "print(m.tle_copy.__module__, m.strided_copy.__name__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=_env(head_tree),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    assert out[0] == str(head_tree / export.COPY_PY)
    assert out[1] == "_kunlunxin.utils.tle_copy _kunlunxin.ops.strided_copy"


@pytest.mark.head_tree
@pytest.mark.parametrize("pr", sorted(HEAD_TESTS))
def test_pr_tests_pass_on_the_head_tree(head_tree, pr):
    # each PR's own tests, every case, kernels run by the interpreter (tle unavailable,
    # the toolchain model on)
    tests = HEAD_TESTS[pr]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    cmd += [*tests, "-p", "no:warnings"]
    done = subprocess.run(
        cmd, cwd=export.REPO, env=_env(head_tree), capture_output=True, text=True
    )
    tail = done.stdout.strip().splitlines()[-1]
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in tail and "skipped" not in tail and "failed" not in tail, tail


def test_head_patch_calls_only_what_the_shared_module_defines():
    # (runs everywhere, CI included: the patch's added lines against the module)
    added = [
        line[1:]
        for line in HEAD_PATCH.read_text().splitlines()
        if line.startswith("+") and not line.startswith("+++")
    ]
    text = "".join(f"{line}\n" for line in added)
    assert "from . import strided_copy\n" in text
    names = set(re.findall(r"\bstrided_copy\.(\w+)\(", text))
    assert names, text
    module = ast.parse((export.REPO / export.STRIDED_COPY_PY).read_text())
    defined = {n.name for n in module.body if isinstance(n, ast.FunctionDef)}
    assert names <= defined, names - defined
    changed = [
        line
        for line in HEAD_PATCH.read_text().splitlines()
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert len(changed) <= 60, len(changed)  # the head patch stays small
