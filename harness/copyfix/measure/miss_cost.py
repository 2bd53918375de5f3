"""PR 7's launch cache on misses: what calls that do not hit cost, cache on vs off.

    python -m copyfix.measure.miss_cost --out results/launch_cache_misses_h200.json

Stock NVIDIA backend, ``torch.add`` of a (64, 64) fp32 view with row stride w (each w
a signature of its own, new to LibEntry too; views made with ``torch.empty``, not
FlagGems' own randn) and a contiguous (64, 64) tensor under ``use_gems()``, one
process.  Workloads, timed per call in alternating rounds (on, off, then off, on):
``all_new`` (every call a first sighting); ``twice_each``, ``thrice_each`` (each new
signature called two or three times in a row); ``round_robin`` (a cycle over
``cap + cap // 4`` signatures, ``MAX_PLANS`` patched to ``--cap``); ``one_signature``
(hits, for reference); ``first_sighting_added_us`` (the cache's own work on a first
sighting, around a call that launches nothing).  ``COPYFIX_MISS_DRY=1`` runs the
plumbing in cpu mode.  The issue's bound: on/off <= 1.10 for the first three.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

from copyfix import provenance, records
from copyfix.measure.launch_cost import OP_FILES, bounds


def measure(rounds: int = 6, cap: int = 16, progress=print) -> dict:
    from unittest import mock

    dry = bool(os.environ.get("COPYFIX_MISS_DRY"))  # the plumbing, in cpu mode
    if dry:
        from copyfix import emulation

        emulation.activate("cpu")
    else:
        os.environ["GEMS_VENDOR"] = "nvidia"

    import torch
    import triton

    import flag_gems
    from flag_gems.utils import launch_cache

    device = "cpu" if dry else "cuda"
    sync = (lambda: None) if dry else torch.cuda.synchronize
    y = torch.randn(64, 64, device=device)
    views = {}

    def view(w):  # a (64, 64) view with row stride w: one signature per w
        if w not in views:
            views[w] = torch.empty(64, w, device=device)[:, :64]  # (no kernel)
        return views[w]

    def add(w):
        return torch.add(view(w), y)

    widths = iter(range(65, 10**6))
    fresh = lambda k: [next(widths) for _ in range(k)]  # noqa: E731

    def timed(calls, on):
        launch_cache.set_enabled(on)
        for w in calls:
            view(w)  # allocated outside the timing
        sync()
        t0 = time.perf_counter()
        for w in calls:
            add(w)
        sync()
        launch_cache.set_enabled(True)
        return (time.perf_counter() - t0) / len(calls) * 1e6

    def alternate(name, calls_of, n_rounds):
        on, off = [], []
        before = launch_cache.stats()
        for r in range(n_rounds):
            for flag in (True, False) if r % 2 == 0 else (False, True):
                (on if flag else off).append(timed(calls_of(r, flag), flag))
        after = launch_cache.stats()
        record = {
            "calls_per_round": len(calls_of(0, True)),
            "rounds": n_rounds,
            "on_us_per_call": round(statistics.median(on), 2),
            "off_us_per_call": round(statistics.median(off), 2),
            "on_over_off": round(statistics.median(on) / statistics.median(off), 3),
            "hits_in_on_rounds": after["hits"] - before["hits"],
            "recordings_in_on_rounds": after["recordings"] - before["recordings"],
        }
        progress(f"{name} {json.dumps(record)}")
        return record

    out = {}
    t_start = time.perf_counter()
    patched_cap = mock.patch.object(launch_cache, "MAX_PLANS", cap)
    with flag_gems.use_gems(), patched_cap, launch_cache.enabled(True):
        add(64)
        sync()
        progress(f"import and first call: {time.perf_counter() - t_start:.1f} s")
        # first calls of new signatures, each column on signatures of its own (a new
        # signature is new to LibEntry and the JIT too: the uncached path pays that)
        out["all_new"] = alternate("all_new", lambda r, on: fresh(40), rounds)
        for name, k, n in (("twice_each", 2, 20), ("thrice_each", 3, 14)):
            out[name] = alternate(
                name, lambda r, on: [w for w in fresh(n) for _ in range(k)], rounds
            )
        ring = fresh(cap + cap // 4)
        launch_cache.set_enabled(False)
        for w in ring:
            add(w)  # compiled, cache untouched
        launch_cache.set_enabled(True)
        for _ in range(6):  # the clock's steady state
            for w in ring:
                add(w)
        out["round_robin"] = alternate(
            "round_robin", lambda r, on: ring * 5, 2 * rounds
        )
        out["round_robin"]["cap"] = cap
        for _ in range(30):
            add(64)
        out["one_signature"] = alternate(
            "one_signature", lambda r, on: [64] * 200, 2 * rounds
        )
        # each call of a thrice-called signature timed alone (with a sync each): the
        # recording call's cost against the same call uncached, per call index
        by_index = {True: [[], [], []], False: [[], [], []]}
        for r in range(2 * rounds):
            for on in (True, False) if r % 2 == 0 else (False, True):
                launch_cache.set_enabled(on)
                for w in fresh(20):
                    view(w)
                    for i in range(3):
                        sync()
                        t0 = time.perf_counter()
                        add(w)
                        sync()
                        by_index[on][i].append((time.perf_counter() - t0) * 1e6)
                launch_cache.set_enabled(True)
        out["by_call_index_us"] = {
            "on": [round(statistics.median(v), 2) for v in by_index[True]],
            "off": [round(statistics.median(v), 2) for v in by_index[False]],
        }
        progress(f"by call index {json.dumps(out['by_call_index_us'])}")
        # the cache's own work on a first sighting (key, remembering the signature),
        # around a call that launches nothing: the part of all_new's on column that
        # the cache adds
        noop = lambda a, b: None  # noqa: E731
        cache = launch_cache.LaunchCache()
        ws = fresh(2000)
        for w in ws:
            view(w)
        t0 = time.perf_counter()
        for w in ws[:1000]:
            cache(noop, (view(w), y), {})
        t1 = time.perf_counter()
        for w in ws[1000:]:
            noop(view(w), y)
        t2 = time.perf_counter()
        out["first_sighting_added_us"] = round(((t1 - t0) - (t2 - t1)) / 1000 * 1e6, 2)
        progress(f"first sighting adds {out['first_sighting_added_us']} us")
    return {
        "what": "PR 7 launch cache, calls that do not hit: cache on vs off, same process, "
        "alternating rounds, torch.add of (64, 64) fp32 views with row stride w "
        "(a signature per w) under use_gems, stock NVIDIA backend",
        **provenance.measured(*OP_FILES),
        "machine": ("dry run, cpu" if dry else torch.cuda.get_device_name(0))
        + f", {platform.node()}",
        "versions": {"torch": torch.__version__, "triton": triton.__version__},
        "cap_note": f"MAX_PLANS patched to {cap} (MAX_SEEN stays {launch_cache.MAX_SEEN}) "
        "so that the round robin's signatures, each compiled first, fit the budget; "
        "the clock's rule does not depend on the cap",
        "bound": "on_over_off <= 1.10 for all_new, twice_each, thrice_each, round_robin",
        "workloads": out,
    }


def misses_section(record: dict) -> dict:
    """``launch_cache_h200.json``'s ``misses`` from a record of :func:`measure`: all_new,
    cyclic_over_cap (round_robin) and first_call (call index 0), cached_us (on) against
    uncached_us (off) and their ratio."""
    w = record["workloads"]
    pairs = {
        name: (w[key]["on_us_per_call"], w[key]["off_us_per_call"])
        for name, key in (("all_new", "all_new"), ("cyclic_over_cap", "round_robin"))
    }
    first = w["by_call_index_us"]
    pairs["first_call"] = (first["on"][0], first["off"][0])
    return {
        name: {"cached_us": on, "uncached_us": off, "ratio": round(on / off, 3)}
        for name, (on, off) in pairs.items()
    }


def with_misses(data: dict, record: dict, name: str) -> dict:
    """launch_cost's ``data`` with ``record``'s misses (file ``name``, same machine
    start), a note, and the bounds again."""
    note = (
        f"{name} of the same machine start ({record['date']}, op "
        f"{record['op_commit']}): cache on (cached_us) vs off (uncached_us), "
        "alternating rounds; bound: each ratio <= 1.10"
    )
    data = {**data, "misses": misses_section(record), "misses_note": note}
    return {**data, "bounds": bounds(data)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="copyfix.measure.miss_cost")
    add = parser.add_argument
    add("--out", type=Path, required=True)
    add("--rounds", type=int, default=6)
    add("--cap", type=int, default=16)
    add("--section-into", type=Path, help="also write 'misses' into launch_cost's JSON")
    args = parser.parse_args(argv)
    progress = lambda m: print(time.strftime("%T"), m, flush=True)  # noqa: E731
    record = measure(args.rounds, args.cap, progress=progress)
    record["date"] = records.date()
    records.write(args.out, record)
    if args.section_into:
        records.update(
            args.section_into, lambda data: with_misses(data, record, args.out.name)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
