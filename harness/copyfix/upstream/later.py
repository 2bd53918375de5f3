"""Upstream's later KunlunXIN ``copy.py`` (the ``tle_copy`` era), run in place of ours
(harness; ``make upstream-later UPSTREAM=<checkout>``), as a new user meets it: ``tle``
unavailable (upstream #6470), aten's strided copy missing (the device model).  Its files
(LATER_FILES, never committed) sit under ``--later``.  Each of VARIANTS (the checkout's,
upstream's later files, PR 1, PR 1 on the later tree) runs ``_cases`` in a child,
:mod:`copyfix.upstream.tle_standin` where the tree has ``tle_copy.py``, and upstream's
``tests/test_copy.py``: ``results/upstream_later_<mode>.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest import mock

from copyfix import records
from copyfix.budget import Budget
from copyfix.upstream import ci as upstream_ci
from copyfix.upstream.common import REPO, first_line, pytest_env

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
VARIANTS = ("base", "later", "ours", "ours-on-head")
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


def _cases(torch):
    """name -> make(device) giving (dst, src, what to compare): src is built on the
    host and reaches the device as a contiguous buffer, views are taken there."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(128, generator=gen)
    mask = torch.rand(2, 1, 1, 16, generator=gen) > 0.5
    long_mask = torch.rand(1, 1, 1, 128, generator=gen) > 0.5
    x = torch.randn(64, 64, generator=gen)
    big = torch.randn(256, 256, generator=gen)
    ramp = torch.arange(64.0)

    def into(shape, dtype, src, view=lambda t: t):
        def make(device):
            dst = torch.zeros(shape, dtype=dtype, device=device)
            return dst, view(src.to(device)), dst

        return make

    def aliasing(device):
        base = ramp.to(device)
        return base[1::2], base[:-1:2], base

    f32, bf16, b8 = torch.float32, torch.bfloat16, torch.bool
    seed, sdpa, sdpa_long = (4, 128), (2, 8, 16, 16), (1, 8, 128, 128)
    expand = lambda *shape: lambda t: t.expand(*shape)
    tr = lambda t: t.t()
    return {
        "seed a.expand(4, 128) -> fp32": into(seed, f32, a, expand(*seed)),
        "seed a.expand(4, 128) -> bf16": into(seed, bf16, a, expand(*seed)),
        "SDPA mask (2,1,1,16) -> (2,8,16,16) bool": into(sdpa, b8, mask, expand(*sdpa)),
        "SDPA mask (2,1,1,16) -> (2,8,16,16) fp32": into(
            sdpa, f32, mask.float(), expand(*sdpa)
        ),
        "SDPA mask (1,1,1,128) -> (1,8,128,128) bool": into(
            sdpa_long, b8, long_mask, expand(*sdpa_long)
        ),
        "small, equal shapes: x.t(), 64x64 fp32": into((64, 64), f32, x, tr),
        "aliasing: b[1::2].copy_(b[:-1:2])": aliasing,
        "declined by tle_copy: x.t(), 256x256 fp32": into((256, 256), f32, big, tr),
        "contiguous, 256x256 fp32": into((256, 256), f32, big),
    }


def _first_line(exc) -> str:
    return f"{type(exc).__name__}: {first_line(str(exc), None)}"


def run_cases(out: Path) -> int:
    """(the child) every case through Tensor.copy_ under use_gems, device model on."""
    import warnings

    from copyfix import emulation, tracking

    warnings.filterwarnings("ignore", message=r"\[device_info\]")
    try:
        mode = emulation.activate()
        import flag_gems
    except Exception as exc:  # (the later file alone on main: see ADAPTATIONS)
        records.write(out, {"import_error": _first_line(exc)})
        return 0
    import torch

    from copyfix.emulation.faults import is_flat_loop

    module, device = emulation.copy_module(), emulation.device()
    cases, strided, op = [], [], torch.ops.aten.copy_.default

    @contextlib.contextmanager
    def classified():  # (innermost: calls on to the counting and faulting layers)
        inner = op.redispatch

        def classifying(keyset, dst, src, *args):
            if isinstance(src, torch.Tensor) and not is_flat_loop(dst, src):
                strided.append(1)
            return inner(keyset, dst, src, *args)

        with mock.patch.object(op, "redispatch", classifying):
            yield

    for name, make in _cases(torch).items():
        host_dst, host_src, host_cmp = make("cpu")
        host_dst.copy_(host_src.clone())
        dst, src, cmp = make(device)
        rec = {"case": name, "numel": dst.numel()}
        strided.clear()
        try:
            with emulation.xpu_device_model(), tracking.track(module) as paths:
                with classified(), flag_gems.use_gems(include=["copy_"]):
                    dst.copy_(src)
        except Exception as exc:  # what the case measures
            rec.update(outcome="error", error=_first_line(exc))
        else:
            got = cmp.cpu()
            same = torch.equal(got.view(torch.uint8), host_cmp.view(torch.uint8))
            rec["outcome"] = "bit-exact" if same else "differs from torch"
        rec.update(fallbacks=paths.fallbacks, strided_fallbacks=len(strided))
        rec["triton_launches"] = len(paths.ranks)
        cases.append(rec)
    tle = sys.modules.get("_kunlunxin.utils.tle_copy")  # (the head trees')
    meta = {
        "mode": mode,
        "versions": emulation.versions(),
        "copy_module": module.__file__,
        "tle_copy_module": getattr(tle, "__file__", None),
        "tle_copy_available": tle.tle_dma_available() if tle else None,
    }
    section = {"meta": meta, "cases": cases}
    if tle is not None:  # which copies reach tle_copy, with TLE stood in
        from copyfix.upstream import tle_standin

        reached = tle_standin.reach(module, device)
        summary = tle_standin.summary(reached)
        section["tle_standin"] = {"summary": summary, "copies": reached}
    records.write(out, section)
    return 0


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


def make_tree(checkout: Path, work: Path, variant: str, later: Path) -> Path:
    from copyfix import export

    tree = upstream_ci.copy_checkout(checkout, work / variant)
    if variant in ("later", "ours-on-head"):  # (trees holding upstream's head files)
        _lay(tree, later)
    if variant == "ours-on-head":
        adapt(tree)  # (named: ADAPTATIONS)
    if variant in ("ours", "ours-on-head"):
        export.apply_stack(tree, "alias-snapshot")  # (with the PRs it needs)
    return tree


def _cases_child(tree: Path, variant: str, args, work: Path) -> dict:
    env = pytest_env(tree / "src", args.mode)
    out = work / f"cases-{variant}.json"
    out.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "copyfix.upstream.later", "--cases", str(out)]
    print(f"[upstream-later] {variant}: cases", flush=True)
    done = subprocess.run(
        cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=args.timeout
    )
    if done.returncode or not out.is_file():
        raise SystemExit(
            f"{variant}: the cases' child failed (rc {done.returncode}):\n"
            f"{done.stdout[-2000:]}{done.stderr[-4000:]}"
        )
    return json.loads(out.read_text())


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


def run_variant(tree: Path, variant: str, args, work: Path) -> dict:
    section = _cases_child(tree, variant, args, work)
    if "import_error" in section and variant == "later":
        print(f"[upstream-later]   import: {section['import_error']}", flush=True)
        as_is = {"import_error": section["import_error"], "adapted": adapt(tree)}
        section = _cases_child(tree, variant, args, work)
        section["as_is"] = as_is
    if "import_error" in section:
        raise SystemExit(
            f"{variant}: flag_gems does not import: {section['import_error']}"
        )
    for rec in section["cases"]:
        print(
            f"[upstream-later]   {rec['case']:46s} {rec['outcome']:10s} "
            f"fallbacks {rec['fallbacks']} {rec.get('error', '')[:70]}",
            flush=True,
        )
    common = dict(mode=args.mode, shims=None, work=work, log_dir=None, pr=variant)
    common["budget"] = Budget(timeout=args.timeout)
    section["test_copy"] = []
    for i, cmd in enumerate(upstream_ci.test_copy_commands(args.test_copy)):
        rec = upstream_ci.run_test_copy(tree, cmd, n=f"{variant}-{i}", **common)
        rec.pop("log_tail", None)
        section["test_copy"].append(rec)
    return section


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="copyfix.upstream.later")
    p.add_argument("checkout", type=Path, nargs="?")
    p.add_argument("--later", type=Path, default=REPO / ".upstream" / "later")
    p.add_argument("--mode", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--test-copy", default="full", choices=("full", "quick", "none"))
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    p.add_argument("--results", type=Path)
    p.add_argument("--timeout", type=float, default=upstream_ci.DEFAULT_TIMEOUT)
    p.add_argument("--cases", type=Path, help=argparse.SUPPRESS)  # (the child)
    p.add_argument("--head-tree", type=Path, help="make this tree head-like, then stop")
    args = p.parse_args(argv)
    if args.cases:
        return run_cases(args.cases)
    try:
        if args.head_tree:
            adapted = make_head_tree(args.head_tree, args.later)
            print("\n".join(adapted) or "no adaptation")
            return 0
        if args.checkout is None:
            raise upstream_ci.InputError("usage: copyfix.upstream.later <checkout>")
        from copyfix import export

        checkout = args.checkout.resolve()
        export.check_preimage(checkout, export.PRS["alias-snapshot"])
        files = later_files(args.later)
    except upstream_ci.InputError as exc:
        print(exc, file=sys.stderr)
        return 2
    results = args.results or REPO / "results" / f"upstream_later_{args.mode}.json"
    op_files = (export.STRIDED_COPY_PY, f"{export.COPY_PY}.head.patch")
    data = {
        "what": "upstream's later tle_copy-era kunlunxin copy.py in place of ours; "
        "tle unavailable, device model on (copyfix.upstream.later)",
        # $COPYFIX_OP_COMMIT first: a copied tree's git HEAD is not what it runs
        **records.stamp(export.COPY_PY, *op_files, mode=args.mode),
        "checkout_copy_py_sha256": records.sha256(checkout / export.COPY_PY),
        "op_sha256": records.sha256(REPO / export.COPY_PY),
        "op_files_sha256": {rel: records.sha256(REPO / rel) for rel in op_files},
        "later_files": files,
        "variants": {},
    }
    with tempfile.TemporaryDirectory(prefix="copyfix-later-") as tmp:
        work = Path(tmp)
        for variant in args.variants:
            tree = make_tree(checkout, work, variant, args.later)
            data["variants"][variant] = run_variant(tree, variant, args, work)
    records.write(results, data)
    print(f"[upstream-later] wrote {results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
