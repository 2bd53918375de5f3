"""Export the PR files: `copy.patch`, and one commit per PR of the stack on a new
branch of a FlagGems checkout (`make patch`, `make pr UPSTREAM=...`).

Each PR's commit message is its text (docs/PR<n>.md, in FlagGems' PR template):
what `gh pr create --fill` posts. The stack is pyproject's [[tool.copyfix.stack]].
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

from copyfix.compose import apply_patch, head_patch, sha256

REPO = Path(__file__).resolve().parents[3]
COPY_PY = "src/flag_gems/runtime/backend/_kunlunxin/ops/copy.py"
STRIDED_COPY_PY = "src/flag_gems/runtime/backend/_kunlunxin/ops/strided_copy.py"


class PR:
    """One upstream PR of the stack (n: its position, from 1)."""

    def __init__(self, name, files, branch, text, patched=(), needs=(), n=0):
        self.name, self.files, self.branch, self.text = name, list(files), branch, text
        self.patched, self.needs, self.n = list(patched), list(needs), n

    @property
    def message(self) -> str:
        return commit_message(REPO / self.text)

    @property
    def changed(self) -> list[str]:
        return list(dict.fromkeys(self.files + self.patched))

    def patch_file(self, rel: str, head: bool = False) -> Path:
        """``<rel>.pr<n>[.head].patch`` if kept, else ``<rel>.patch`` (not on head)."""
        own = REPO / f"{rel}.pr{self.n}{'.head' if head else ''}.patch"
        return own if own.is_file() or head else REPO / f"{rel}.patch"

    def kept_files(self) -> list[str]:
        out = list(self.files)
        for rel in self.patched:
            for head in (False, True):
                path = self.patch_file(rel, head)
                if path.is_file():
                    out.append(str(path.relative_to(REPO)))
        return list(dict.fromkeys(out))


# FlagGems' PR template's headings, in order, and the length of a PR text
TEMPLATE_HEADINGS = tuple(
    "PR Category|Type of Change|Description|Issue|Progress|Performance".split("|")
)
MAX_LINES = 30
MAX_PERFORMANCE_LINES = 6


def pr_text_parts(text: str) -> tuple[str, str]:
    """(title, body) of a PR text; SystemExit names what breaks the template."""
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
    body = "\n".join(lines[1:]).strip("\n")
    return lines[0][2:].strip(), body


def changed_lines(patch: Path) -> int:
    """A stage patch's changed lines: its ``+``/``-`` lines, less the file headers."""
    return sum(
        1
        for line in Path(patch).read_text().splitlines()
        if line.startswith(("+", "-")) and line[:3] not in ("+++", "---")
    )


def commit_message(pr_md: Path) -> str:
    title, body = pr_text_parts(Path(pr_md).read_text())
    return f"{title}\n\n{body}\n"


# the op's diff, per base it was written against
PATCHES = {
    "5.0.2": REPO / "copy.patch",
    "main-2026-08-21": REPO / "copy-main-2026-08-21.patch",
}


def patch_path() -> Path:
    from copyfix.emulation import flag_gems_base

    base = flag_gems_base()
    if base not in PATCHES:
        raise SystemExit(f"no patch is kept for the installed flag_gems base ({base})")
    return PATCHES[base]


def _copyfix_table() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["copyfix"]


PRS = {
    e["name"]: PR(**e, text=f"docs/PR{n}.md", n=n)
    for n, e in enumerate(_copyfix_table()["stack"], 1)
}


def preimages(path: str = COPY_PY) -> list[str]:
    return _copyfix_table()["preimages"][path]


def check_preimage(tree: Path, pr: "PR", table=None, originals=None) -> None:
    """Exit unless `tree` (or ``originals``, texts before earlier PRs wrote them)
    holds a known pre-image of each base file pr replaces or patches."""
    table = table or _copyfix_table()
    pre, head = table["preimages"], table.get("head-preimages", {})
    for path in pr.changed:
        if path not in pre and path not in head:
            continue  # a file the stack adds
        target = tree / path
        if originals is not None and path in originals:
            found = hashlib.sha256(originals[path].encode()).hexdigest()
        elif not target.is_file():
            raise SystemExit(f"{tree} is not a FlagGems checkout (no {path})")
        else:
            found = sha256(target)
        known = [*pre.get(path, ()), *head.get(path, ())]
        if found not in known:
            raise SystemExit(
                f"refusing {pr.name} PR: {target} has sha256 {found}, not a known pre-image "
                f"({', '.join(known)}); rebase the overlay on that checkout first"
            )


def apply_pr(tree: Path, name: str, originals=None) -> list[str]:
    """Write PR `name`'s files into `tree` from their upstream texts (``originals``
    where an earlier PR already wrote them); upstream's head file takes patches."""
    pr, table, originals = PRS[name], _copyfix_table(), originals or {}

    def upstream_text(rel):
        return originals[rel] if rel in originals else (tree / rel).read_text()

    def on_head(rel):  # (upstream's file is one of its head pre-images)
        if rel not in originals and not (tree / rel).is_file():
            return False
        digest = hashlib.sha256(upstream_text(rel).encode()).hexdigest()
        return digest in table.get("head-preimages", {}).get(rel, ())

    patches = {rel: pr.patch_file(rel, on_head(rel)) for rel in pr.patched}
    check_preimage(tree, pr, table, originals)
    for rel in pr.files:
        dst = tree / rel
        if on_head(rel):
            patch = head_patch(REPO / rel)
            dst.write_text(
                apply_patch(upstream_text(rel), patch.read_text(), str(patch))
            )
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / rel, dst)
    for rel, patch in patches.items():
        if not patch.is_file():
            continue  # (upstream's head file: this PR leaves it alone)
        diff, dst = patch.read_text(), tree / rel
        text = dst.read_text() if dst.is_file() else ""  # ("" : a file it adds)
        if text and "\nnew file mode" in diff[:300]:
            raise SystemExit(
                f"{rel} exists: {patch.name} adds it; apply the stack in order"
            )
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(apply_patch(text, diff, str(patch)))
    return pr.changed


def with_needs(name: str) -> list[str]:
    wanted, todo = set(), [name]
    while todo:
        n = todo.pop()
        if n not in wanted:
            wanted.add(n)
            todo += PRS[n].needs
    return [n for n in PRS if n in wanted]


def apply_stack(tree: Path, name: str, also=()) -> list[str]:
    """PR ``name`` written into ``tree`` on top of the PRs it needs, then each PR of
    ``also`` but ``name`` over the tree as it stands (as a merged tree holds both)."""
    names = with_needs(name)
    rels = dict.fromkeys(rel for n in names for rel in PRS[n].changed)
    originals = {r: (tree / r).read_text() for r in rels if (tree / r).is_file()}
    order = [(n, originals) for n in names] + [(n, None) for n in also if n != name]
    applied = [rel for n, texts in order for rel in apply_pr(tree, n, texts)]
    return list(dict.fromkeys(applied))


def added_code(rel: str, upto: int = 0) -> str:
    """The lines PRs 1 to ``upto`` (0: all) add to upstream's ``rel``."""
    out = []
    for pr in PRS.values():
        if rel in pr.patched and (not upto or pr.n <= upto):
            for line in pr.patch_file(rel).read_text().splitlines(keepends=True):
                if line.startswith("+") and not line.startswith("+++"):
                    out.append(line[1:])
    return "".join(out)


def main_shaped_copy(text: str) -> str:
    """flag-gems 5.0.2's KunlunXIN copy.py as main of 2026-08-21 holds it."""
    if hashlib.sha256(text.encode()).hexdigest() == preimages(COPY_PY)[1]:
        return text  # (main's already)
    header = "".join((REPO / COPY_PY).read_text().splitlines(True)[:14])
    for old, new in (
        (
            'getLogger("flag_gems").getChild(__name__.lstrip("."))',
            "getLogger(__name__)",
        ),
        ('"GEMS COPY (functional)"', '"GEMS_KUNLUNXIN COPY"'),
        ('"GEMS COPY_"', '"GEMS_KUNLUNXIN COPY_"'),
    ):
        text = text.replace(old, new)
    out = header + text
    if hashlib.sha256(out.encode()).hexdigest() != preimages(COPY_PY)[1]:
        raise SystemExit("not flag-gems 5.0.2's KunlunXIN copy.py")
    return out


def base_copy_text() -> str:
    pre = REPO / "build/composed/flag_gems/_overlay_preimages"
    kept = pre / COPY_PY.split("flag_gems/", 1)[1]
    if not kept.is_file():
        raise SystemExit(
            f"{kept} missing: run `pip install -e .` (or `make venv`) first"
        )
    return kept.read_text()


def make_patch(pre_image: str) -> str:
    """The op's diff from `pre_image`, then strided_copy.py's as a new file."""
    ours = (REPO / COPY_PY).read_text().splitlines(True)
    diff = difflib.unified_diff(
        pre_image.splitlines(True), ours, f"a/{COPY_PY}", f"b/{COPY_PY}"
    )
    new = (REPO / STRIDED_COPY_PY).read_text().splitlines(True)
    added = difflib.unified_diff([], new, "/dev/null", f"b/{STRIDED_COPY_PY}")
    return (
        f"diff --git a/{COPY_PY} b/{COPY_PY}\n{''.join(diff)}"
        f"diff --git a/{STRIDED_COPY_PY} b/{STRIDED_COPY_PY}\n"
        f"new file mode 100644\n{''.join(added)}"
    )


def write_patch() -> Path:
    path = patch_path()
    path.write_text(make_patch(base_copy_text()))
    return path


def _git(checkout: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(checkout), *args], check=True, capture_output=True, text=True
    ).stdout


def upstream_lint(checkout: Path, files: list[str]) -> None:
    """black, isort and flake8 with the checkout's pre-commit config's arguments."""
    config_path = checkout / ".pre-commit-config.yaml"
    config = yaml.safe_load(config_path.read_text()) if config_path.is_file() else {}
    hooks = [h for repo in config.get("repos", []) for h in repo.get("hooks", [])]
    py = [f for f in files if f.endswith(".py")]
    checks = {"black": ["--check"], "isort": ["--check-only"], "flake8": []}
    for tool, check in checks.items():
        args = next((h.get("args", []) for h in hooks if h.get("id") == tool), [])
        cmd = [sys.executable, "-m", tool, *check, *map(str, args), *py]
        result = subprocess.run(cmd, cwd=checkout, capture_output=True, text=True)
        if result.returncode:
            raise SystemExit(
                f"upstream {tool} rejects the exported files:\n{result.stdout}{result.stderr}"
            )


def export_pr(checkout: Path, names=None) -> dict[str, str]:
    """One one-commit branch per PR, on its last need's branch, else on HEAD."""
    checkout = checkout.resolve()
    unknown = sorted(set(names or ()) - set(PRS))
    if unknown:
        raise SystemExit(
            f"unknown PR {', '.join(unknown)} (the stack: {', '.join(PRS)})"
        )
    names = [n for n in PRS if n in (names or PRS)]
    if not (checkout / ".git").exists():
        raise SystemExit(f"{checkout} is not a FlagGems git checkout (no .git)")
    touched = dict.fromkeys(rel for n in names for rel in PRS[n].changed)
    originals = {
        rel: (checkout / rel).read_text()
        for rel in touched
        if (checkout / rel).is_file()
    }
    for name in names:
        check_preimage(checkout, PRS[name], originals=originals)
    if _git(checkout, "status", "--porcelain", "--untracked-files=no").strip():
        raise SystemExit(f"refusing to export: {checkout} has uncommitted changes")
    start = _git(checkout, "rev-parse", "HEAD").strip()
    shas = {}
    for name in names:
        pr = PRS[name]
        base = PRS[pr.needs[-1]].branch if pr.needs else start
        _git(checkout, "switch", "-q", "-c", pr.branch, base)
        apply_pr(checkout, name, originals)
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
    pr = sub.add_parser("pr")
    pr.add_argument("checkout", type=Path)
    pr.add_argument("--only", nargs="+", choices=sorted(PRS), default=None)
    one = sub.add_parser("apply-pr", help="write one PR's changes into a tree (no git)")
    one.add_argument("name", choices=sorted(PRS))
    one.add_argument("tree", type=Path)
    args = parser.parse_args(argv)
    if args.cmd == "patch":
        print(f"wrote {write_patch()}")
    elif args.cmd == "apply-pr":
        print("\n".join(apply_stack(args.tree, args.name)))
    else:
        for name, sha in export_pr(args.checkout, args.only).items():
            print(f"{name}: committed {sha[:12]} on branch {PRS[name].branch}")
        print(f"in {args.checkout}; copy.patch regenerated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
