"""PR 3's launch cache on misses: what calls that do not hit cost, cache on vs off.

Harness file (not part of the upstream PR)::

    python -m copyfix.measure.miss_cost --out results/launch_cache_misses_h200.json

Stock NVIDIA backend (``GEMS_VENDOR=nvidia``), ``torch.add`` of a (64, 64) fp32 view
with row stride w and a contiguous (64, 64) tensor under ``flag_gems.use_gems()``, one
process: each w is a signature of its own (strides are in the key).  Every kernel specialization is
compiled first (a pass over every shape with the cache off, which leaves the cache
untouched), so both columns time host work only.  Workloads, each timed in alternating
rounds (on, off, then off, on, ...), per call:

* ``all_new``: every call of a signature never seen before (its first call);
* ``twice_each``: each new signature called twice in a row (its first and second
  call: the second is the one that records);
* ``round_robin``: a cycle over ``MAX_PLANS + 44`` signatures, after warm-up cycles;
* ``one_signature``: the same call again and again (hits, for reference).

The issue's bound is on/off <= 1.10 for the first three.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

from copyfix.measure.launch_cost import _op_commit


def measure(rounds: int = 5, batch: int = 100, progress=print) -> dict:
    os.environ["GEMS_VENDOR"] = "nvidia"
    import torch
    import triton

    import flag_gems
    from flag_gems.utils import launch_cache

    device = "cuda"
    cap = launch_cache.MAX_PLANS
    cycle = cap + 44
    sync = torch.cuda.synchronize
    pairs = {}

    y = torch.randn(64, 64, device=device)

    def tensors(w):
        # a (64, 64) view with row stride w: a new signature per w that no kernel
        # specializes on beyond w % 16 (a new shape can need a compile of its own)
        if w not in pairs:
            pairs[w] = torch.randn(64, w, device=device)[:, :64]
        return pairs[w]

    def add(w):
        return torch.add(tensors(w), y)

    new_shapes = iter(range(65, 10**6))  # each workload takes fresh ones
    fresh = lambda k: [next(new_shapes) for _ in range(k)]  # noqa: E731
    plan = {
        "all_new": [fresh(batch) for _ in range(rounds)],
        "twice_each": [fresh(batch // 2) for _ in range(rounds)],
    }
    ring = fresh(cycle)
    t_start = time.perf_counter()
    with flag_gems.use_gems():
        launch_cache.set_enabled(False)
        for k, shapes in enumerate([*plan["all_new"], *plan["twice_each"], ring, [64]]):
            for n in shapes:  # compile every specialization, cache untouched
                add(n)
            sync()
            progress(f"warm-up {k}: {time.perf_counter() - t_start:.1f} s")
        launch_cache.set_enabled(True)
        launch_cache.clear()
        for _ in range(6):  # the ring's steady state
            for n in ring:
                add(n)
        for _ in range(30):
            add(64)
        sync()

        def timed(calls, on):
            launch_cache.set_enabled(on)
            sync()
            t0 = time.perf_counter()
            count = 0
            for n in calls:
                add(n)
                count += 1
            sync()
            launch_cache.set_enabled(True)
            return (time.perf_counter() - t0) / count * 1e6

        workloads = {
            "all_new": lambda r: plan["all_new"][r],
            "twice_each": lambda r: [n for n in plan["twice_each"][r] for _ in (0, 1)],
            "round_robin": lambda r: ring,
            "one_signature": lambda r: [64] * batch,
        }
        out = {}
        for name, calls_of in workloads.items():
            on, off = [], []
            before = launch_cache.stats()
            for r in range(rounds):
                calls = calls_of(r)
                order = (True, False) if r % 2 == 0 else (False, True)
                for flag in order:
                    (on if flag else off).append(timed(calls, flag))
            after = launch_cache.stats()
            out[name] = {
                "calls_per_round": len(calls_of(0)),
                "rounds": rounds,
                "on_us_per_call": round(statistics.median(on), 2),
                "off_us_per_call": round(statistics.median(off), 2),
                "on_over_off": round(statistics.median(on) / statistics.median(off), 3),
                "hits_in_on_rounds": after["hits"] - before["hits"],
                "misses_in_on_rounds": after["misses"] - before["misses"],
            }
            progress(f"{name} {json.dumps(out[name])}")
    return {
        "what": "PR 3 launch cache, calls that do not hit: cache on vs off, same process, "
        "alternating rounds, torch.add of (64, 64) fp32 views with row stride w "
        "(a signature per w) under use_gems, stock NVIDIA backend",
        "op_commit": _op_commit(),
        "machine": torch.cuda.get_device_name(0) + f", {platform.node()}",
        "versions": {"torch": torch.__version__, "triton": triton.__version__},
        "max_plans": cap,
        "bound": "on_over_off <= 1.10 for all_new, twice_each, round_robin",
        "workloads": out,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="copyfix.measure.miss_cost")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    record = measure(
        args.rounds, progress=lambda m: print(time.strftime("%T"), m, flush=True)
    )
    record["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
