"""Export the PR files: `copy.patch`, and one commit on a new branch of a FlagGems checkout.

    python -m copyfix.export patch            # regenerate the installed base's patch (pre-image -> ours)
    python -m copyfix.export check-patch      # exit 1 if that patch is stale
    python -m copyfix.export pr <checkout>    # what `make pr UPSTREAM=...` runs

The export refuses a checkout whose kunlunxin copy.py is not a known pre-image
(pyproject's [tool.copyfix.preimages]: flag-gems 5.0.2, or main of 2026-08-21,
which differs only in its licence header and logger lines), and runs the
checkout's own lint settings (black, isort, flake8 from its .pre-commit-config.yaml)
on the exported files before committing.

Each PR's commit message is its own PR text (`commit_message`): the text's first line,
a `# ` heading, is the title; the rest, verbatim, is the body, in FlagGems' PR template
(`pr_text_parts` refuses a text that is not). A one-commit branch so carries exactly
what `gh pr create --fill` posts. A new PR is one `PR(...)` entry in `_prs()` and a PR
text in that form.
"""

import argparse
import difflib
import shutil
import subprocess
import sys
from pathlib import Path

import tomllib
import yaml

from copyfix.compose import apply_patch, head_patch, sha256

REPO = Path(__file__).resolve().parents[3]
COPY_PY = "src/flag_gems/runtime/backend/_kunlunxin/ops/copy.py"
# the strided Triton copy both integrations of copy.py call (a new upstream file)
STRIDED_COPY_PY = "src/flag_gems/runtime/backend/_kunlunxin/ops/strided_copy.py"
# PR 1 (KunlunXIN strided copy_): what goes upstream, at the same paths in a FlagGems checkout.
PR_FILES = [
    COPY_PY,
    STRIDED_COPY_PY,
    "tests/test_copy_ops.py",
    "benchmark/test_copy_strided.py",
]


class PR:
    """One upstream PR: its files, the file whose pre-image it needs, its branch, its
    PR text (repository-relative), from which its commit message is made, and the
    upstream files it edits through a patch kept beside their tree path."""

    def __init__(self, name, files, preimage_path, branch, text, patched=()):
        self.name, self.files, self.preimage_path = name, list(files), preimage_path
        self.branch, self.text = branch, text
        self.patched = list(patched)

    @property
    def message(self) -> str:
        return commit_message(REPO / self.text)

    @property
    def changed(self) -> list[str]:
        return self.files + self.patched


# FlagGems' PR template (.github/PULL_REQUEST_TEMPLATE.md): its headings, in order, and
# the length of a merged PR's text that this repository holds its own to.
TEMPLATE_HEADINGS = (
    "PR Category",
    "Type of Change",
    "Description",
    "Issue",
    "Progress",
    "Performance",
)
MAX_LINES = 60
MAX_PERFORMANCE_LINES = 12
MAX_PERFORMANCE_ROWS = 6


def pr_text_parts(text: str) -> tuple[str, str]:
    """(title, body) of a PR text: its first line, a `# ` heading, is the title; the
    body is everything after it, verbatim. SystemExit names what breaks the template."""
    lines = text.rstrip("\n").splitlines()
    if not lines or not lines[0].startswith("# "):
        raise SystemExit("a PR text must start with its title as a '# ' heading")
    if len(lines) > MAX_LINES:
        raise SystemExit(f"a PR text has at most {MAX_LINES} lines, not {len(lines)}")
    headings = [line[4:].strip() for line in lines if line.startswith("### ")]
    if tuple(headings) != TEMPLATE_HEADINGS:
        raise SystemExit(
            f"a PR text has FlagGems' template headings {list(TEMPLATE_HEADINGS)}, "
            f"in order; found {headings}"
        )
    performance = lines[lines.index("### Performance") :]
    if len(performance) > MAX_PERFORMANCE_LINES:
        raise SystemExit(
            f"a PR text's Performance section has at most {MAX_PERFORMANCE_LINES} lines"
        )
    rows = [line for line in performance if line.startswith("|")][2:]  # (header, rule)
    if len(rows) > MAX_PERFORMANCE_ROWS:
        raise SystemExit(f"a Performance table has at most {MAX_PERFORMANCE_ROWS} rows")
    body = "\n".join(lines[1:]).strip("\n")
    return lines[0][2:].strip(), body


def commit_message(pr_md: Path) -> str:
    """The commit message of the PR whose text is `pr_md`: its title line, a blank
    line, then its body verbatim (committed with --cleanup=verbatim, so the `###`
    headings stay and `gh pr create --fill` posts exactly this text)."""
    title, body = pr_text_parts(Path(pr_md).read_text())
    return f"{title}\n\n{body}\n"


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


def _prs() -> dict:
    """Every PR `make pr` exports, one `PR(...)` entry each: its files, branch, text."""
    from copyfix.export import pr_generic
    from copyfix.export import pr_kunlunxin_to as pr4
    from copyfix.export import pr_launch_cache as lc

    prs = [
        PR("kunlunxin", PR_FILES, COPY_PY, BRANCH, "docs/PR.md"),
        PR(
            "generic",
            pr_generic.FILES,
            pr_generic.PREIMAGE_PATH,
            pr_generic.BRANCH,
            "docs/PR2.md",
        ),
        PR(
            "launch-cache",
            lc.FILES,
            lc.PATCHED[0],
            lc.BRANCH,
            "docs/PR3.md",
            lc.PATCHED,
        ),
        PR(pr4.NAME, pr4.FILES, pr4.PREIMAGE_PATH, pr4.BRANCH, "docs/PR4.md"),
    ]
    return {pr.name: pr for pr in prs}


PRS = _prs()


def _copyfix_table() -> dict:
    """pyproject's [tool.copyfix]."""
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["copyfix"]


def _preimage_table() -> dict:
    """pyproject's [tool.copyfix.preimages]: path -> the sha256s of its pre-images."""
    return _copyfix_table()["preimages"]


def preimages(path: str = COPY_PY) -> list[str]:
    return _preimage_table()[path]


def head_preimages() -> dict:
    """pyproject's [tool.copyfix.head-preimages]: path -> the sha256s of the upstream
    head files that path's ``<path>.head.patch`` edits (copyfix.compose.head_patch)."""
    return _copyfix_table().get("head-preimages", {})


def check_preimage(tree: Path, pr: "PR", table=None) -> None:
    """Exit with a one-line reason unless `tree` holds a known pre-image of each base
    file pr replaces (its op file, and any other PR file with recorded pre-images)
    and of every file it patches.  ``table``: pyproject's [tool.copyfix], if read."""
    table = table or _copyfix_table()
    table, head = table["preimages"], table.get("head-preimages", {})
    replaced = [f for f in pr.files if f != pr.preimage_path and f in table]
    for path in dict.fromkeys([pr.preimage_path, *replaced, *pr.patched]):
        target = tree / path
        if not target.is_file():
            raise SystemExit(f"{tree} is not a FlagGems checkout (no {path})")
        found = sha256(target)
        if found not in table[path] and found not in head.get(path, ()):
            known = [*table[path], *head.get(path, ())]
            raise SystemExit(
                f"refusing {pr.name} PR: {target} has sha256 {found}, not a known pre-image "
                f"({', '.join(known)}); rebase the overlay on that checkout first"
            )


def apply_pr(tree: Path, name: str) -> list[str]:
    """Write PR `name`'s files into the FlagGems tree `tree` (pre-image checked first)."""
    pr = PRS[name]
    table = _copyfix_table()
    check_preimage(tree, pr, table)
    head = table.get("head-preimages", {})
    for rel in pr.files:
        dst = tree / rel
        if dst.is_file() and sha256(dst) in head.get(rel, ()):
            # upstream's head file (a head pre-image): the patch, not our whole file
            patch = head_patch(REPO / rel)
            dst.write_text(apply_patch(dst.read_text(), patch.read_text(), str(patch)))
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / rel, dst)
    for rel in pr.patched:
        patch = REPO / f"{rel}.patch"
        target = tree / rel
        target.write_text(
            apply_patch(target.read_text(), patch.read_text(), str(patch))
        )
    return pr.changed


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


def _file_diff(pre_image: str, ours: str, path: str) -> str:
    lines = difflib.unified_diff(
        pre_image.splitlines(keepends=True),
        ours.splitlines(keepends=True),
        fromfile=f"a/{path}",
        tofile=f"b/{path}",
    )
    return f"diff --git a/{path} b/{path}\n" + "".join(lines)


def make_patch(pre_image: str, path: str = COPY_PY) -> str:
    """The op's diff from `pre_image`, followed by the module it adds (PR 1's
    strided_copy.py, a new file: `new file mode`, from /dev/null)."""
    diff = _file_diff(pre_image, (REPO / path).read_text(), path)
    if path != COPY_PY:
        return diff
    new = (REPO / STRIDED_COPY_PY).read_text().splitlines(keepends=True)
    added = difflib.unified_diff(
        [], new, fromfile="/dev/null", tofile=f"b/{STRIDED_COPY_PY}"
    )
    return (
        diff
        + f"diff --git a/{STRIDED_COPY_PY} b/{STRIDED_COPY_PY}\n"
        + "new file mode 100644\n"
        + "".join(added)
    )


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
        upstream_lint(checkout, pr.changed)
        _git(checkout, "add", *pr.changed)
        _git(checkout, "commit", "-q", "--cleanup=verbatim", "-m", pr.message)
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
    one = sub.add_parser("apply-pr", help="write one PR's changes into a tree (no git)")
    one.add_argument("name", choices=sorted(PRS))
    one.add_argument("tree", type=Path)
    args = parser.parse_args(argv)
    if args.cmd == "patch":
        print(f"wrote {write_patch()}")
    elif args.cmd == "check-patch":
        if patch_path().read_text() != make_patch(base_copy_text()):
            print("copy.patch is stale: run `make patch`", file=sys.stderr)
            return 1
        print("copy.patch is in sync")
    elif args.cmd == "apply-pr":
        print("\n".join(apply_pr(args.tree, args.name)))
    else:
        for name, sha in export_pr(args.checkout, args.only).items():
            print(f"{name}: committed {sha[:12]} on branch {PRS[name].branch}")
        print(f"in {args.checkout}; copy.patch regenerated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
