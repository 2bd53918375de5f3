"""Compose flag_gems = pinned base + this repo's overlay (called by hatch_build.py).

The base is $FLAGGEMS_BASE (a FlagGems checkout, or a directory holding flag_gems/)
or else the installed flag-gems==5.0.2. Each base file an overlay file replaces or a
``<file>.patch`` edits must be a known pre-image ([tool.copyfix.preimages]); on one of
upstream's head pre-images an overlay file's ``<file>.head.patch`` is applied instead.
The overlay is symlinked (editable) or copied (wheels) over a copy of the base in a
temporary folder, swapped into build/composed when complete.

    PYTHONPATH=harness python -m copyfix.compose [--project DIR] [--no-editable]
"""

import hashlib
import importlib.util
import os
import runpy
import shutil
import tempfile
from pathlib import Path

import tomllib

OVERLAY_ROOT = Path("src")
COMPOSED = Path("build") / "composed"


def sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def apply_patch(text: str, patch: str, name: str, reverse: bool = False) -> str:
    """``text`` with ``patch`` applied (or taken out), hunks matched in order."""
    hunks, hunk = [], None
    for line in patch.splitlines(keepends=True):
        if line.startswith("@@"):
            hunk = ([], [])
            hunks.append(hunk)
        elif hunk is not None and line[:1] in (" ", "-", "+"):
            if line[:1] != ("-" if reverse else "+"):
                hunk[0].append(line[1:])
            if line[:1] != ("+" if reverse else "-"):
                hunk[1].append(line[1:])
    if not hunks:
        raise RuntimeError(f"{name}: no hunks")
    lines, cursor = text.splitlines(keepends=True), 0
    for number, (old, new) in enumerate(hunks, 1):
        at = next(
            (
                i
                for i in range(cursor, len(lines) - len(old) + 1)
                if lines[i : i + len(old)] == old
            ),
            None,
        )
        if at is None:
            raise RuntimeError(f"{name}: hunk {number} does not apply to the base")
        lines[at : at + len(old)] = new
        cursor = at + len(new)
    return "".join(lines)


def find_base() -> tuple[Path, str]:
    env = os.environ.get("FLAGGEMS_BASE")
    if env:
        root = Path(env).expanduser().resolve()
        for candidate in (root / "src" / "flag_gems", root / "flag_gems", root):
            if (candidate / "__init__.py").is_file() and candidate.name == "flag_gems":
                return candidate, f"FLAGGEMS_BASE={root}"
        raise RuntimeError(
            f"FLAGGEMS_BASE={env}: no flag_gems package found (looked for src/flag_gems, flag_gems)"
        )
    spec = importlib.util.find_spec("flag_gems")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("flag-gems base not installed in the build environment")
    base = Path(list(spec.submodule_search_locations)[0]).resolve()
    version = "unknown"
    for dist in base.parent.glob("flag_gems-*.dist-info"):
        version = dist.name[len("flag_gems-") : -len(".dist-info")]
    where = str(base)
    if "pip-build-env" in where:
        where = "pip's isolated build environment"
    return base, f"PyPI flag-gems=={version} (from {where})"


def head_patch(overlay_file: Path) -> Path:
    return overlay_file.with_name(overlay_file.name + ".head.patch")


def compose(project: Path, editable: bool) -> Path:
    table = tomllib.loads((project / "pyproject.toml").read_text())["tool"]["copyfix"]
    preimages, head = table["preimages"], table.get("head-preimages", {})
    base, origin = find_base()
    root = project / OVERLAY_ROOT / "flag_gems"
    overlay = sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)
    patches = sorted(root.rglob("*.py.patch"))
    replaced, head_patched = [], []
    for src in overlay + patches:
        rel = src.relative_to(root)
        if src.suffix == ".patch":
            rel = rel.with_suffix("")
        key = str(OVERLAY_ROOT / "flag_gems" / rel)
        target = base / rel
        if target.exists():
            found = sha256(target)
            known = preimages.get(key)
            if found in head.get(key, ()) and src.suffix == ".py":
                head_patched.append(src)  # (applied below, in place of the file)
                replaced.append(rel)
                continue
            if known is None:
                raise RuntimeError(
                    f"{key} replaces a base file but has no recorded pre-image in pyproject.toml"
                )
            if found not in known:
                raise RuntimeError(
                    f"pre-image mismatch for {key}: the base file {target} has sha256 {found}, "
                    f"the overlay was written against {' or '.join([*known, *head.get(key, ())])}. "
                    "Refusing to compose; rebase the overlay on this base first."
                )
            replaced.append(rel)
        elif key in preimages:
            raise RuntimeError(
                f"{key}: expected a base file to replace at {target}, found none"
            )

    out = project / COMPOSED
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".composed-", dir=out.parent))
    try:
        pkg = tmp / "flag_gems"
        shutil.copytree(base, pkg, ignore=shutil.ignore_patterns("__pycache__"))
        for rel in replaced:
            keep = pkg / "_overlay_preimages" / rel
            keep.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(base / rel, keep)
        for src in overlay:
            dst = pkg / src.relative_to(root)
            if src in head_patched:
                patch = head_patch(src)
                dst.write_text(
                    apply_patch(dst.read_text(), patch.read_text(), str(patch))
                )
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.unlink(missing_ok=True)
            if editable:
                dst.symlink_to(src)
            else:
                shutil.copy2(src, dst)
        for patch in patches:
            rel = patch.relative_to(root).with_suffix("")
            (pkg / rel).write_text(
                apply_patch((base / rel).read_text(), patch.read_text(), str(patch))
            )
        info = {
            "BASE_ORIGIN": origin,
            "OVERLAY_FILES": [str(p.relative_to(project)) for p in overlay],
            "PATCHES": [str(p.relative_to(project)) for p in patches]
            + [str(head_patch(p).relative_to(project)) for p in head_patched],
            "REPLACED": [str(r) for r in replaced],
            "EDITABLE": editable,
            "OVERLAY_REPO": str(project) if editable else None,
        }
        (pkg / "_overlay_info.py").write_text(
            '"""Written by hatch_build.py: what this composed flag_gems is made of."""\n'
            + "".join(f"{k} = {v!r}\n" for k, v in info.items())
        )
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def overlay_info(package: Path) -> dict:
    """``package/_overlay_info.py``'s values, read by path ({}: not composed)."""
    info = Path(package) / "_overlay_info.py"
    if not info.is_file():
        return {}
    return {k: v for k, v in runpy.run_path(str(info)).items() if k.isupper()}


def decompose(composed: Path, dst: Path, only=None) -> Path:
    """Copy a composed package to ``dst`` as its base had it (with ``only``: just
    those files go back to the base, and the composition's own files stay)."""
    shutil.copytree(
        composed, dst, symlinks=False, ignore=shutil.ignore_patterns("__pycache__")
    )
    keep = None if only is None else set(only)
    pre = dst / "_overlay_preimages"
    for kept in pre.rglob("*.py"):
        rel = str(kept.relative_to(pre))
        if keep is None or rel in keep:
            shutil.copyfile(kept, dst / rel)
    info = overlay_info(dst)
    prefix = str(OVERLAY_ROOT / "flag_gems") + "/"
    replaced = set(info["REPLACED"])
    for added in info["OVERLAY_FILES"]:
        rel = added[len(prefix) :] if added.startswith(prefix) else None
        if rel is not None and rel not in replaced and (keep is None or rel in keep):
            (dst / rel).unlink(missing_ok=True)
    if keep is None:
        shutil.rmtree(pre)
        (dst / "_overlay_info.py").unlink()
    return dst


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="copyfix.compose",
        description="compose build/composed/flag_gems: the base ($FLAGGEMS_BASE, or the "
        "installed flag-gems 5.0.2) with this repository's overlay",
    )
    parser.add_argument(
        "--project", type=Path, default=Path("."), help="the repository (default: .)"
    )
    parser.add_argument(
        "--no-editable",
        dest="editable",
        action="store_false",
        help="copy the overlay files (default: symlink them, as pip install -e)",
    )
    args = parser.parse_args(argv)
    print(compose(args.project.resolve(), editable=args.editable))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
