"""Export the PR files: `copy.patch`, and one commit on a new branch of a FlagGems checkout.

    python -m copyfix.export patch            # regenerate the installed base's patch (pre-image -> ours)
    python -m copyfix.export check-patch      # exit 1 if that patch is stale
    python -m copyfix.export pr <checkout>    # what `make pr UPSTREAM=...` runs

The export refuses a checkout whose kunlunxin copy.py is not a known pre-image
(pyproject's [tool.copyfix.preimages]: flag-gems 5.0.2, or main of 2026-08-21,
which differs only in its licence header and logger lines), and runs the
checkout's own lint settings (black, isort, flake8 from its .pre-commit-config.yaml)
on the exported files before committing.
"""

import argparse
import difflib
import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import tomllib
import yaml

REPO = Path(__file__).resolve().parents[2]
COPY_PY = "src/flag_gems/runtime/backend/_kunlunxin/ops/copy.py"
# PR 1 (KunlunXIN strided copy_): what goes upstream, at the same paths in a FlagGems checkout.
PR_FILES = [
    COPY_PY,
    "tests/test_copy_ops.py",
    "benchmark/test_copy_strided.py",
]


class PR:
    """One upstream PR: its files, the file whose pre-image it needs, branch, message."""

    def __init__(self, name, files, preimage_path, branch, message):
        self.name, self.files, self.preimage_path = name, list(files), preimage_path
        self.branch, self.message = branch, message


# `git apply`-able diffs of the op, one per base it was written against (the seed's
# copy.patch is the 5.0.2 one).  The installed base picks which one is checked/written.
PATCHES = {
    "5.0.2": REPO / "copy.patch",
    "main-2026-08-21": REPO / "copy-main-2026-08-21.patch",
}


def patch_path() -> Path:
    """The patch file for the base the installed flag_gems was composed from."""
    from copyfix.emulation import flag_gems_base

    base = flag_gems_base()
    if base not in PATCHES:
        raise SystemExit(f"no patch is kept for the installed flag_gems base ({base})")
    return PATCHES[base]


BRANCH = "kunlunxin/strided-copy"
COMMIT_MESSAGE = """[KUNLUNXIN] Route strided copy_ through the pointwise_dynamic kernel

copy_ on KunlunXIN sent every non-contiguous source to aten's native strided
copy, which torch_xmlir does not implement (`CUDA error: invalid device
function`), e.g. for expanded SDPA masks. Strided sources and destinations now
run through the existing pointwise_dynamic copy kernel with their real strides,
after TensorIterator-style reordering and coalescing of dimensions, with torch's
overlap/broadcast errors raised before any write, bool casts as `!= 0`, and
copies beyond int32 indexing split along the outermost dimension.

Adds tests/test_copy_ops.py (layout x dtype matrix, direct calls, rank 1-8,
torch-semantics gap checks, SDPA mask end to end, hypothesis fuzz) and
benchmark/test_copy_strided.py.
"""


def _prs() -> dict:
    prs = {"kunlunxin": PR("kunlunxin", PR_FILES, COPY_PY, BRANCH, COMMIT_MESSAGE)}
    try:  # PR 2, the generic op's conversions (independent of PR 1)
        from copyfix import pr_generic
    except ImportError:
        return prs
    prs["generic"] = PR(
        "generic",
        pr_generic.FILES,
        pr_generic.PREIMAGE_PATH,
        pr_generic.BRANCH,
        pr_generic.COMMIT_MESSAGE,
    )
    # PR 4, the KunlunXIN _to_copy's conversions (independent of PRs 1 and 2)
    from copyfix import pr_kunlunxin_to as pr4

    prs[pr4.NAME] = PR(
        pr4.NAME, pr4.FILES, pr4.PREIMAGE_PATH, pr4.BRANCH, pr4.COMMIT_MESSAGE
    )
    return prs


PRS = _prs()


def preimages(path: str = COPY_PY) -> list[str]:
    table = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["copyfix"][
        "preimages"
    ]
    return table[path]


def check_preimage(tree: Path, pr: "PR") -> None:
    """Exit with a one-line reason unless `tree` holds a known pre-image of each base
    file pr replaces (its op file, and any other PR file with recorded pre-images)."""
    table = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["copyfix"]
    replaced = [
        f for f in pr.files if f != pr.preimage_path and f in table["preimages"]
    ]
    for path in [pr.preimage_path, *replaced]:
        target = tree / path
        if not target.is_file():
            raise SystemExit(f"{tree} is not a FlagGems checkout (no {path})")
        found = hashlib.sha256(target.read_bytes()).hexdigest()
        if found not in preimages(path):
            raise SystemExit(
                f"refusing {pr.name} PR: {target} has sha256 {found}, not a known pre-image "
                f"({', '.join(preimages(path))}); rebase the overlay on that checkout first"
            )


def apply_pr(tree: Path, name: str) -> list[str]:
    """Write PR `name`'s files into the FlagGems tree `tree` (pre-image checked first)."""
    pr = PRS[name]
    check_preimage(tree, pr)
    for rel in pr.files:
        dst = tree / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / rel, dst)
    return pr.files


def base_copy_text() -> str:
    """The base's kunlunxin copy.py, as the editable build kept it."""
    kept = (
        REPO
        / "build"
        / "composed"
        / "flag_gems"
        / "_overlay_preimages"
        / COPY_PY.split("flag_gems/", 1)[1]
    )
    if not kept.is_file():
        raise SystemExit(
            f"{kept} missing: run `pip install -e .` (or `make venv`) first"
        )
    return kept.read_text()


def make_patch(pre_image: str, path: str = COPY_PY) -> str:
    ours = (REPO / path).read_text()
    lines = difflib.unified_diff(
        pre_image.splitlines(keepends=True),
        ours.splitlines(keepends=True),
        fromfile=f"a/{path}",
        tofile=f"b/{path}",
    )
    return f"diff --git a/{path} b/{path}\n" + "".join(lines)


def write_patch() -> Path:
    path = patch_path()
    path.write_text(make_patch(base_copy_text()))
    return path


def _git(checkout: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(checkout), *args], check=True, capture_output=True, text=True
    ).stdout


def _hook_args(config: dict, hook_id: str) -> list[str]:
    for repo in config.get("repos", []):
        for hook in repo.get("hooks", []):
            if hook.get("id") == hook_id:
                return [str(a) for a in hook.get("args", [])]
    return []


def upstream_lint(checkout: Path, files: list[str]) -> None:
    """black, isort and flake8 with the arguments the checkout's pre-commit config gives them."""
    config_path = checkout / ".pre-commit-config.yaml"
    config = yaml.safe_load(config_path.read_text()) if config_path.is_file() else {}
    py = [f for f in files if f.endswith(".py")]
    for tool in ("black", "isort", "flake8"):
        check = {"black": ["--check"], "isort": ["--check-only"], "flake8": []}[tool]
        cmd = [sys.executable, "-m", tool, *check, *_hook_args(config, tool), *py]
        result = subprocess.run(cmd, cwd=checkout, capture_output=True, text=True)
        if result.returncode:
            raise SystemExit(
                f"upstream {tool} rejects the exported files:\n{result.stdout}{result.stderr}"
            )


def export_pr(checkout: Path, names=None) -> dict[str, str]:
    """One branch per PR from the checkout's HEAD, one commit each; {name: commit}."""
    checkout = checkout.resolve()
    names = list(names or PRS)
    if not (checkout / ".git").exists():
        raise SystemExit(f"{checkout} is not a FlagGems git checkout (no .git)")
    for name in names:
        check_preimage(checkout, PRS[name])
    if _git(checkout, "status", "--porcelain", "--untracked-files=no").strip():
        raise SystemExit(f"refusing to export: {checkout} has uncommitted changes")
    start = _git(checkout, "rev-parse", "HEAD").strip()
    shas = {}
    for name in names:
        pr = PRS[name]
        _git(checkout, "switch", "-q", "-c", pr.branch, start)
        apply_pr(checkout, name)
        upstream_lint(checkout, pr.files)
        _git(checkout, "add", *pr.files)
        _git(checkout, "commit", "-q", "-m", pr.message)
        shas[name] = _git(checkout, "rev-parse", "HEAD").strip()
    write_patch()
    return shas


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="copyfix.export")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("patch")
    sub.add_parser("check-patch")
    pr = sub.add_parser("pr")
    pr.add_argument("checkout", type=Path)
    pr.add_argument("--only", nargs="+", choices=sorted(PRS), default=None)
    args = parser.parse_args(argv)
    if args.cmd == "patch":
        print(f"wrote {write_patch()}")
    elif args.cmd == "check-patch":
        if patch_path().read_text() != make_patch(base_copy_text()):
            print("copy.patch is stale: run `make patch`", file=sys.stderr)
            return 1
        print("copy.patch is in sync")
    else:
        for name, sha in export_pr(args.checkout, args.only).items():
            print(f"{name}: committed {sha[:12]} on branch {PRS[name].branch}")
        print(f"in {args.checkout}; copy.patch regenerated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
