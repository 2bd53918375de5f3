"""Where a KunlunXIN ``copy_`` hit spends its host time, layer by layer (cuda emulation).

    COPYFIX_EMULATION=cuda python -m copyfix.measure.breakdown [--layout L] [--label N] [--out F.json]

One process, one 64x64 fp32 copy (``--layout``: transposed, a source ``x.t()`` made once;
contiguous stops with a message on the current op: both integrations hand a small
contiguous copy of one dtype to native), every column in the same alternating
rounds (``Timer.host_us_interleaved``), each one layer thinner than the one before:

* ``aten``: ``dst.copy_(src)`` without FlagGems;
* ``dispatched``: the same call under ``use_gems(include=["copy_"])``;
* ``op``: ``copy.py``'s ``copy_`` called directly (no torch dispatch);
* ``wrapper``: the cached ``instantiate(ndim)`` wrapper ``copy_`` launches through;
* ``plan``: the cache's recorded plan, run directly (no key, no lookup);
* ``launcher``: the compiled kernel's ``run`` with the plan's arguments;
* ``floor``: an in-place ``torch.library`` op launching a compiled Triton copy;
* ``floor_run``: that compiled copy's ``run`` alone.

Differences between neighbours are the cost of a layer: dispatched - op is torch's
dispatch into Python, op - wrapper is ``copy.py``'s own checks, wrapper - plan the
cache's key and lookup, plan - launcher the plan's reads (device, stream, hooks),
launcher - floor_run what the pointwise kernel's longer argument list costs the launcher.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

SIDE = 64


def measure(rounds: int, calls: int, layout: str = "transposed") -> dict:
    from copyfix import emulation

    mode = emulation.activate()
    import torch
    import triton

    import flag_gems
    from copyfix.measure.timing import Timer, run_info

    kx = sys.modules["_kunlunxin.ops.copy"]
    on_device = torch.cuda.is_available()
    device = flag_gems.device
    timer = Timer(torch, on_device)
    src = torch.randn(SIDE, SIDE, device=device)
    dst = torch.empty_like(src)
    if layout == "transposed":
        src = src.t()
    gems = lambda: flag_gems.use_gems(include=["copy_"])  # noqa: E731
    with gems():
        dst.copy_(src)
    kx.copy_(dst, src)
    from copyfix.tracking import kernel_home

    wrapper = kernel_home(kx)._kernel_for(dst, src).instantiate(dst.ndim)
    wrapper(src, out0=dst)
    plans = [p for p in wrapper.launch_cache.plans.values() if hasattr(p, "run")]
    if len(plans) != 1:  # (e.g. a small contiguous copy: both integrations go native)
        raise SystemExit(f"copy_ of the {layout} layout did not launch through Triton")
    (plan,) = plans
    driver = triton.runtime.driver.active

    def launch():
        stream = driver.get_current_stream(driver.get_current_device())
        gx, gy, gz = plan.grid
        function, metadata = plan.handles
        plan.launcher(gx, gy, gz, stream, function, metadata, None, None, None,
                      src, dst, *plan.tail)  # fmt: skip

    null = contextlib.nullcontext
    columns = {
        "aten": (null, lambda: dst.copy_(src)),
        "dispatched": (gems, lambda: dst.copy_(src)),
        "dispatched_all": (flag_gems.use_gems, lambda: dst.copy_(src)),
        "op": (null, lambda: kx.copy_(dst, src)),
        "wrapper": (null, lambda: wrapper(src, out0=dst)),
        "plan": (null, lambda: plan.run((src,), {"out0": dst})),
        "launcher": (null, launch),
    }
    if on_device:
        from copyfix.measure.floors import copy_floor

        op, floor_run = copy_floor(torch, src)
        columns["floor"] = (null, lambda: op(dst, src))
        columns["floor_run"] = (null, lambda: floor_run(dst, src))
    before = wrapper.launch_cache.hits
    us = timer.host_us_interleaved(columns, rounds=rounds, calls=calls)
    assert wrapper.launch_cache.hits > before  # the wrapper column hit the cache
    assert torch.equal(dst, src)
    return {
        "layout": layout,
        **run_info(torch, mode, rounds, calls),
        "us": us,
        "over_aten": {k: v / us["aten"] for k, v in us.items()},
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="copyfix.measure.breakdown")
    p.add_argument("--out", type=Path)
    p.add_argument("--rounds", type=int, default=25)
    p.add_argument("--calls", type=int, default=300)
    p.add_argument(
        "--layout", choices=("contiguous", "transposed"), default="transposed"
    )
    p.add_argument("--label", help="merge into --out under this key")
    args = p.parse_args(argv)
    result = measure(args.rounds, args.calls, args.layout)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out and args.label:
        data = json.loads(args.out.read_text()) if args.out.is_file() else {}
        data[args.label] = result
        args.out.write_text(json.dumps(data, indent=1) + "\n")
    elif args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
