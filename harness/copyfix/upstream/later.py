"""Upstream's later KunlunXIN files (the ``tle_copy`` era; LATER_FILES, never committed,
under ``--later``) laid into a copy of FlagGems main with the named ADAPTATIONS: the
head-like tree (``main-head`` in docs/UPSTREAM_CHECK.md; ``make test-head`` builds its own
from LATER_FILES and :func:`adapt`).  Harness only.

    python -m copyfix.upstream.later --head-tree TREE [--later DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from copyfix import records
from copyfix.upstream import ci as upstream_ci
from copyfix.upstream.common import REPO

KUNLUNXIN = "src/flag_gems/runtime/backend/_kunlunxin"
# name under --later: (path in FlagGems, where it was read, sha256 the report cites)
LATER_FILES = {
    "copy.py": (
        f"{KUNLUNXIN}/ops/copy.py",
        "search tool read_file, repo flagos-ai/FlagGems, file id 66940093390 (found by "
        "find_string 'tle_copy(expanded_src, dst)'; the index names no commit for this "
        "version: find_files lists f1615be17e96 for the path, an older version, and "
        "read_file without a commit returns 32fdaa92a17a, the copy_slice-era one)",
        "4394edfb0b7b765f78bd9c815bb797770408e203ff0aaf72a48ddd56f77e14d3",
    ),
    "tle_copy.py": (
        f"{KUNLUNXIN}/utils/tle_copy.py",
        "search tool read_file, repo flagos-ai/FlagGems, commit "
        "7e9fd963d19935ef5ea4543ab354362c5d119056",
        "6aada84c798766a5bb162fdc67ca2ad9af504dd565491b78e91c173851069b84",
    ),
    # PR 2's and PR 4's files at their newest public versions, which their
    # ``.head.patch`` files edit
    "ops_copy.py": (
        "src/flag_gems/ops/copy.py",
        "search tool read_file, repo flagos-ai/FlagGems, file id 66459022050 (the "
        "version with the opt-in FLAG_GEMS_PPU_COPY_* paths; the index names no commit "
        "for it, and no blob of the 2026-08-21 mirror's refs has its hash)",
        "0fec011818c0cf005884617df1c6360a32f141c288bd2059d3f40ea241f433c6",
    ),
    "ops_to.py": (
        "src/flag_gems/ops/to.py",
        "search tool read_file, repo flagos-ai/FlagGems, file id 59986192789 (the "
        "_can_use_triton / CANN 8.5 to_dtype version; no commit named, not in the "
        "mirror)",
        "ee5fb622baf922eafbeab8be426667fc943c055afc5488934f573ccbd640fb30",
    ),
    "kunlunxin_to_head.py": (
        f"{KUNLUNXIN}/ops/to.py",
        "search tool read_file, repo flagos-ai/FlagGems, file id 59458016069: commit "
        "3dc44c0d0ce8ccdcecd58d3a38ed4b16666fa099 ('fix some ops', 2026-08-11), on the "
        "fix_klx_op branch and several PR refs of the mirror, not on its master",
        "cf99ee03868031aa0782581869adcba2de9fc65812092e876058d70bd6352719",
    ),
}
# What the later copy.py needs changed around it on main of 2026-08-21 to import at all:
# main's kunlunxin contiguous.py imports copy_slice from it, which the later file no
# longer defines (the later trees' own contiguous.py cannot be read here). contiguous
# is imported by the vendor ops but not registered, so the name is never called.
ADAPTATIONS = (
    (
        f"{KUNLUNXIN}/ops/contiguous.py",
        "from _kunlunxin.ops.copy import copy, copy_slice\n",
        "from _kunlunxin.ops.copy import copy\n\ncopy_slice = None  # (copyfix.upstream.later)\n",
    ),
)


def later_files(folder: Path) -> dict:
    recs = {}
    for name, (upstream_path, source, cited) in LATER_FILES.items():
        path = folder / name
        if not path.is_file():
            raise upstream_ci.InputError(
                f"{path} missing: read {upstream_path} of flagos-ai/FlagGems ({source}) "
                f"and save it there"
            )
        sha = records.sha256(path)
        recs[name] = dict(upstream_path=upstream_path, source=source, sha256=sha)
        recs[name].update(as_cited=sha == cited, bytes=path.stat().st_size)
    return recs


def _lay(tree: Path, later: Path) -> None:
    for name, (upstream_path, _, _) in LATER_FILES.items():
        shutil.copyfile(later / name, tree / upstream_path)


def adapt(tree: Path) -> list[str]:
    done = []
    for rel, old, new in ADAPTATIONS:
        path = tree / rel
        text = path.read_text() if path.is_file() else ""
        if old in text:
            path.write_text(text.replace(old, new))
            done.append(f"{rel}: {old.strip()!r} -> {new.strip()!r}")
    return done


def make_head_tree(tree: Path, later: Path) -> list[str]:
    """Make ``tree`` (main of 2026-08-21) head-like in place: the later files (sha256
    checked) plus ADAPTATIONS; what was adapted."""
    files = later_files(later)
    if wrong := [n for n, rec in files.items() if not rec["as_cited"]]:
        raise upstream_ci.InputError(
            f"{later}: {', '.join(wrong)} not the cited sha256"
        )
    _lay(tree, later)
    return adapt(tree)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="copyfix.upstream.later")
    p.add_argument("--later", type=Path, default=REPO / ".upstream" / "later")
    p.add_argument("--head-tree", type=Path, required=True, help="make it head-like")
    args = p.parse_args(argv)
    try:
        adapted = make_head_tree(args.head_tree, args.later)
    except upstream_ci.InputError as exc:
        print(exc, file=sys.stderr)
        return 2
    print("\n".join(adapted) or "no adaptation")
    return 0


if __name__ == "__main__":
    sys.exit(main())
