"""How far trimming PR 1's host checks could take the strided ``copy_`` (cuda emulation).

    COPYFIX_EMULATION=cuda python -m copyfix.measure.trim_probe [--out F.json]

Issue 32 allows trimming ``copy.py``'s checks.  This probe measures the most a trim of
the fork's hit path could save, without changing PR 1: :func:`trimmed_copy_` is that
path with every check the hot path needs read once, in one frame (dtype in the Triton
set and equal, layouts strided, dst contiguous, one device, one shape, one neg bit, not
empty, within one launch, no alias, no zero tensor, both storages int32-indexable), then
the same cached ``instantiate(ndim)`` wrapper ``_copied_plain`` launches; anything else
goes to the fork's own ``copy_``.  It drops only the logger call and frames.  Registered
on FlagGems' dispatch key like ``use_gems(include=["copy_"])``, it is timed beside
aten's ``copy_`` and the current fork ``copy_`` in alternating rounds, for
``launch_cost``'s strided rows; each result is compared bit for bit with aten's.
This is evidence, not a candidate for the PR: nothing here is imported by an op.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path


def make_trimmed(torch, kx, sc):
    """The trimmed hit path over the fork's copy module ``kx`` and its shared module
    ``sc`` (strided_copy), falling back to ``kx.copy_``."""
    dtypes, max_numel, i32 = sc._TRITON_DTYPES, sc._MAX_NUMEL, sc._INT32_MAX
    alias, tensor, strided = torch._C._is_alias_of, torch.Tensor, torch.strided
    contiguous_kernel, slice_kernel = sc._copy_kernel, sc.copy_slice

    def trimmed_copy_(dst, src, non_blocking=False):
        dtype = dst.dtype
        if (
            isinstance(src, tensor)
            and dtype is src.dtype
            and dtype in dtypes
            and dst.layout is strided
            and src.layout is strided
            and dst.is_contiguous()
            and dst.device == src.device
            and dst.shape == src.shape
            and dst.is_neg() == src.is_neg()
            and 0 < dst.numel() <= max_numel
            and not alias(dst, src)
            and not dst._is_zerotensor()
            and not src._is_zerotensor()
            and dst.untyped_storage().nbytes() <= i32
            and src.untyped_storage().nbytes() <= i32
        ):
            kernel = contiguous_kernel if src.is_contiguous() else slice_kernel
            kernel.instantiate(dst.ndim)(src, out0=dst)
            return dst
        # (counted off the hit path: it costs a hit nothing)
        trimmed_copy_.fallbacks += 1
        return kx.copy_(dst, src, non_blocking)

    trimmed_copy_.fallbacks = 0
    return trimmed_copy_


def measure(rounds: int, calls: int) -> dict:
    from copyfix.measure.launch_cost import strided_copy_rows
    from copyfix.measure.timing import Timer, run_info
    from copyfix.tracking import kernel_home

    mode, torch, flag_gems, cases, gems = strided_copy_rows()
    on_device = torch.cuda.is_available()
    kx = sys.modules["_kunlunxin.ops.copy"]
    trimmed = make_trimmed(torch, kx, kernel_home(kx))

    @contextlib.contextmanager
    def trim():
        lib = torch.library.Library("aten", "IMPL")
        lib.impl("copy_", trimmed, flag_gems.runtime.device.dispatch_key)
        try:
            yield
        finally:
            lib._destroy()

    out = {}
    null = contextlib.nullcontext
    for name, fn in cases.items():
        ref = fn().clone()
        exact = {}
        for label, ctx in (("current", gems), ("trimmed", trim)):
            with ctx():
                fn().zero_()  # (the next call must write every element)
                exact[label] = bool(torch.equal(fn(), ref))
        us = Timer(torch, on_device).host_us_interleaved(
            {"aten": (null, fn), "current": (gems, fn), "trimmed": (trim, fn)},
            rounds=rounds,
            calls=calls,
        )
        out[name] = {
            "us": us,
            "over_aten": {k: v / us["aten"] for k, v in us.items()},
            "saved_us": us["current"] - us["trimmed"],
            "bit_exact_vs_aten": exact,
            "trimmed_fallbacks": trimmed.fallbacks,  # 0: every timed call took the hit path
        }
        print(name, json.dumps(out[name]), flush=True)
    return {
        "what": "python -m copyfix.measure.trim_probe: aten copy_ vs the fork's copy_ "
        "(current) vs its hit path trimmed to one frame of single reads (trimmed), all "
        "dispatched, alternating rounds, one process",
        **run_info(torch, mode, rounds, calls),
        "cases": out,
    }


def report_lines(path: Path) -> list[str]:
    """docs/PERFORMANCE_ACCURACY.md's section on the trim probe's record."""
    import statistics

    if not path.is_file():
        return []
    data = json.loads(path.read_text())
    procs = data["processes"]
    lines = [
        "",
        f"### The most a trim of PR 1's checks saves (`results/{path.name}`, op "
        f"`{(data.get('op_commit') or 'unknown')[:7]}`)",
        "",
        f"{data['machine']}, {data['date']}: `{data['command']}`. {data['what']}. "
        "Medians over the processes:",
        "",
        "| row | aten µs | current/aten | trimmed/aten | saved µs | bit-exact | "
        "trimmed fallbacks |",
        "|---|---:|---:|---:|---:|---|---:|",
    ]
    for name in procs[0]["cases"]:
        rows = [p["cases"][name] for p in procs]

        def med(f, rows=rows):
            return statistics.median(f(r) for r in rows)

        exact = all(all(r["bit_exact_vs_aten"].values()) for r in rows)
        lines.append(
            f"| {name} | {med(lambda r: r['us']['aten']):.1f} "
            f"| {med(lambda r: r['over_aten']['current']):.2f} "
            f"| {med(lambda r: r['over_aten']['trimmed']):.2f} "
            f"| {med(lambda r: r['saved_us']):.2f} | {'yes' if exact else '**no**'} "
            f"| {sum(r['trimmed_fallbacks'] for r in rows)} |"
        )
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="copyfix.measure.trim_probe")
    p.add_argument("--out", type=Path)
    p.add_argument("--rounds", type=int, default=19)
    p.add_argument("--calls", type=int, default=300)
    args = p.parse_args(argv)
    from copyfix.measure.launch_cost import _op_commit
    from copyfix.measure.timing import add_process

    result = {**measure(args.rounds, args.calls), "op_commit": _op_commit()}
    if args.out:
        add_process(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
