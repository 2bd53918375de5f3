"""Host cost per call of FlagGems pointwise ops, before and after PR 7's launch cache.

    python -m copyfix.measure.launch_cost nvidia --out results/launch_cache_h200.json
    python -m copyfix.measure.launch_cost kunlunxin-emulated --out results/launch_cache_h200.json

``nvidia``: FlagGems' NVIDIA backend, 64x64 fp32 pointwise ops and ``copy_`` under
``use_gems()``, and the floor (:mod:`.floors`).  ``kunlunxin-emulated``: the
KunlunXIN ``copy_`` (PR 1) in the cuda emulation against aten's copy, and
``floor_copy``.  Columns, alternating rounds in one process: eager, before (the base's
pointwise_dynamic: :mod:`.base_twins`), after (cache on), cache off;
each compared bit for bit; merged by (name, backend).  ``--processes N``: N fresh
workers, :func:`combine`-d; ``starts``: every five-process start (:func:`add_start`).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from copyfix import provenance, records

REPO = Path(__file__).resolve().parents[3]
SIDE = 64
COPY_BOUND = 2.5  # each strided copy_'s after/aten, per integration
NVIDIA_MEDIAN_BOUND = 2.3  # the NVIDIA ops' median after/eager
NVIDIA_MAX_BOUND = 3.5  # each NVIDIA op's after/eager
MISS_BOUND = 1.10  # cached/uncached of calls that do not hit


_KX = "src/flag_gems/runtime/backend/_kunlunxin/ops/"
# The files timed (PR 7, and the copy_ and .to() ops of PRs 1, 2 and 5).
OP_FILES = (
    "src/flag_gems/utils/launch_cache.py",
    "src/flag_gems/utils/pointwise_dynamic.py.patch",
    "src/flag_gems/ops/where.py.patch", "src/flag_gems/ops/copy.py",
    "src/flag_gems/ops/to.py", _KX + "copy.py", _KX + "copy.py.head.patch",
    _KX + "strided_copy.py",
)  # fmt: skip


def _nvidia_cases(torch, device):
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(SIDE, SIDE, device=device, generator=g)
    y = torch.randn(SIDE, SIDE, device=device, generator=g)
    cond = x > 0
    dst = torch.empty(SIDE, SIDE, device=device)
    xt = torch.randn(SIDE, SIDE, device=device, generator=g).t()
    return {
        "sigmoid": lambda: torch.sigmoid(x),
        "relu": lambda: torch.relu(x),
        "abs": lambda: torch.abs(x),
        "add": lambda: torch.add(x, y),
        "mul_scalar": lambda: torch.mul(x, 2.5),
        "where": lambda: torch.where(cond, x, y),
        "to_bf16": lambda: x.to(torch.bfloat16),
        "copy_contiguous": lambda: dst.copy_(x),
        "copy_transposed": lambda: dst.copy_(xt),
    }


def _kunlunxin_cases(torch, device):
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(SIDE, SIDE, device=device, generator=g)
    mask = torch.randn(1, 1, SIDE, SIDE, device=device, generator=g)
    dst = torch.empty(SIDE, SIDE, device=device)
    dst4 = torch.empty(2, 4, SIDE, SIDE, device=device)
    wide = torch.randn(SIDE, 2 * SIDE, device=device, generator=g)
    # The views are made once, outside the timed calls: what is timed is copy_ alone
    # (main of 2026-08-21 registers expand as a FlagGems op, whose host cost would
    # otherwise be charged to copy_ on the head integration, and not on 5.0.2's).
    xt, sdpa, step = x.t(), mask.expand(2, 4, SIDE, SIDE), wide[:, ::2]
    return {
        "copy_contiguous": lambda: dst.copy_(x),
        "copy_transposed": lambda: dst.copy_(xt),
        "copy_expanded_sdpa_mask": lambda: dst4.copy_(sdpa),
        "copy_step_slice": lambda: dst.copy_(step),
    }


# The strided copy_ layouts whose after/aten is bounded (contiguous goes to native on
# both integrations)
STRIDED = ("copy_transposed", "copy_expanded_sdpa_mask", "copy_step_slice")


def _floor(torch, timer, device, backend) -> dict:
    """The floor row (:mod:`.floors`, no FlagGems): a ``torch.library`` op launching a
    compiled Triton sigmoid (nvidia) or in-place contiguous copy (kunlunxin)."""
    from copyfix.measure.floors import copy_floor, sigmoid_floor

    x = torch.randn(SIDE, SIDE, device=device)
    if backend == "nvidia":
        name, op = "floor", sigmoid_floor(torch, x)
        eager, floor = (lambda: torch.sigmoid(x)), (lambda: op(x))
        assert torch.equal(op(x), eager()) or torch.allclose(op(x), eager())
    else:
        dst = torch.empty_like(x)
        name, (op, _) = "floor_copy", copy_floor(torch, x)
        eager, floor = (lambda: dst.copy_(x)), (lambda: op(dst, x))
        floor()
        assert torch.equal(dst, x)
    null = contextlib.nullcontext
    row = timer.host_us_interleaved({"eager": (null, eager), "floor": (null, floor)})
    return {"name": name, "backend": backend, "eager_us": row["eager"],
            "before_us": row["floor"], "after_us": row["floor"]}  # fmt: skip


KUNLUNXIN_BACKENDS = ("kunlunxin-emulated",)


def measure(backend: str, calls: int, rounds: int):
    if backend == "nvidia":
        os.environ["GEMS_VENDOR"] = "nvidia"
        mode = "native nvidia"
    else:
        from copyfix import emulation

        mode = emulation.activate()
    import torch
    import triton

    import flag_gems
    from copyfix.compose import overlay_info
    from copyfix.measure.base_twins import GENERIC, KUNLUNXIN, base_twins, swapped
    from copyfix.measure.timing import Timer
    from flag_gems.utils import launch_cache

    on_device = torch.cuda.is_available()
    device = flag_gems.device if backend != "nvidia" else "cuda"
    timer = Timer(torch, on_device)
    if backend == "nvidia":
        cases, gems = _nvidia_cases(torch, device), flag_gems.use_gems
    else:
        cases = _kunlunxin_cases(torch, device)
        gems = lambda: flag_gems.use_gems(include=["copy_"])
        with gems():
            cases["copy_contiguous"]()  # (imports the copy module)
        # the composed kunlunxin copy.py must be the fork's integration (no tle_copy)
        module = sys.modules["_kunlunxin.ops.copy"]
        if hasattr(module, "tle_copy"):
            raise SystemExit(
                f"{backend}: the composed {module.__file__} is the head integration; "
                "compose over the fork base first"
            )
    with gems():
        for fn in cases.values():  # import every op module before the twins are made
            fn()
    twins = base_twins(GENERIC if backend == "nvidia" else KUNLUNXIN)
    # the base's pointwise functions (twins also holds the patched op modules' base
    # functions, which have no overloads to count)
    pd_twins = list(
        {id(t): t for t in twins.values() if hasattr(t, "overloads")}.values()
    )

    @contextlib.contextmanager
    def before():
        with gems(), swapped(twins):
            yield

    @contextlib.contextmanager
    def cache(on: bool):  # (opt-in: "after" turns it on, "cache off" off)
        with launch_cache.enabled(on), gems():
            yield

    after, off = functools.partial(cache, True), functools.partial(cache, False)
    alike = lambda a, b: bool(torch.equal(a, b) and a.stride() == b.stride())

    rows = []
    for name, fn in cases.items():
        ref = fn().clone()
        results = {}
        seen = {id(t): len(t.overloads) for t in pd_twins}
        for label, ctx in (("after", after), ("before", before), ("off", off)):
            with ctx():
                results[label] = fn().clone()
        # "before" ran the base's code: a twin was instantiated, or had been
        base_used = not twins or (  # (no twins: the base's code is this code)
            any(len(t.overloads) for t in pd_twins)
            and any(len(t.overloads) != seen[id(t)] or t.overloads for t in pd_twins)
        )
        with after():  # the calls a signature runs uncached before one records it
            for _ in range(launch_cache.ADMIT_AFTER):
                fn()
        stats = launch_cache.stats()
        with after():
            fn()
        hit = launch_cache.stats()["hits"] > stats["hits"]
        exact = {k: alike(v, ref) for k, v in results.items()}
        same = all(alike(results[k], results["before"]) for k in ("after", "off"))
        row = timer.host_us_interleaved(
            {"eager": (contextlib.nullcontext, fn), "before": (before, fn),
             "after": (after, fn), "cache_off": (off, fn)},
            rounds=rounds, calls=calls,
        )  # fmt: skip
        rows.append({"name": name, "backend": backend,
                        "eager_us": row["eager"], "before_us": row["before"],
                        "after_us": row["after"], "cache_off_us": row["cache_off"],
                        "bit_exact_vs_eager": exact, "after_hits": hit,
                        "after_and_off_bit_exact_vs_before": same,
                        "before_ran_base_code": bool(base_used)})  # fmt: skip
        print(f"{backend:20s} {name:26s} eager {row['eager']:7.1f}  before "
              f"{row['before']:7.1f}  after {row['after']:7.1f}  off {row['cache_off']:7.1f}"
              f"  exact {exact}", flush=True)  # fmt: skip
    used = sum(1 for t in pd_twins if t.overloads)
    if on_device:
        rows.append(_floor(torch, timer, device, backend))
        print(f"{rows[-1]['name']} {rows[-1]}", flush=True)
    machine = torch.cuda.get_device_name() if on_device else platform.processor()
    base = overlay_info(Path(flag_gems.__file__).parent)
    return rows, {
        "machine": f"{machine or 'cpu'}, {os.cpu_count()} CPU cores",
        # the CPUs the process was allowed (a pinned run: taskset -c N)
        "cpus_allowed": sorted(os.sched_getaffinity(0)),
        "mode": mode,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "flag_gems_base": base.get("BASE_ORIGIN", "unknown"),
        "twins_used": used,
        "calls_per_round": calls,
        "rounds": rounds,
    }


def _ratio(r, key):
    """A row's ``key`` over its eager column (combined rows: their median_ratio)."""
    median = r.get("median_ratio", {}).get(key)
    return median if median is not None else r[key] / r["eager_us"]


def combine(runs: list) -> list:
    """One row per (name, backend) from several processes' rows (one list each): the
    µs columns' medians, ``per_process``, ``median_ratio`` / ``max_ratio`` of each
    process's own column/eager, each bit-for-bit check true if true in every one."""
    rows_of = {}
    for rows in runs:
        for r in rows:
            rows_of.setdefault((r["name"], r["backend"]), []).append(r)
    out = []
    for (name, backend), rows in rows_of.items():
        if len(rows) != len(runs):
            raise ValueError(f"{backend} {name}: in {len(rows)} of {len(runs)} runs")
        cols = [k for k in rows[0] if k.endswith("_us")]
        row = {"name": name, "backend": backend}
        row.update({k: statistics.median(r[k] for r in rows) for k in cols})
        for k, v in rows[0].items():
            if isinstance(v, dict):
                row[k] = {c: all(r[k][c] for r in rows) for c in v}
            elif isinstance(v, bool):
                row[k] = all(r[k] for r in rows)
        ratios = {
            k: [r[k] / r["eager_us"] for r in rows] for k in cols if k != "eager_us"
        }
        row["median_ratio"] = {k: statistics.median(v) for k, v in ratios.items()}
        row["max_ratio"] = {k: max(v) for k, v in ratios.items()}
        row["per_process"] = [{k: r[k] for k in cols} for r in rows]
        out.append(row)
    return out


def _in_processes(args) -> tuple:
    """:func:`measure` in ``args.processes`` fresh interpreters in turn, combined."""
    runs, info = [], None
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.processes):
            out = Path(tmp) / f"worker{i}.json"
            cmd = [sys.executable, "-m", "copyfix.measure.launch_cost", args.backend,
                   "--out", str(out), "--calls", str(args.calls),
                   "--rounds", str(args.rounds)]  # fmt: skip
            print(f"--- worker process {i + 1} of {args.processes}", flush=True)
            subprocess.run(cmd, check=True)
            data = json.loads(out.read_text())
            runs.append([r for r in data["ops"] if r["backend"] == args.backend])
            info = info or data["runs"][args.backend]
    return combine(runs), {**info, "processes": args.processes}


def summarize(ops: list) -> dict:
    out = {}
    for name in ("nvidia", *KUNLUNXIN_BACKENDS):
        floor_name = "floor" if name == "nvidia" else "floor_copy"
        rows = [r for r in ops if r["backend"] == name and r["name"] != floor_name]
        floor = next((r for r in ops if r["backend"] == name and r["name"] == floor_name), None)  # fmt: skip
        if not rows:
            continue
        after = [_ratio(r, "after_us") for r in rows]
        before = [_ratio(r, "before_us") for r in rows]
        if name != "nvidia":
            out[name] = {"max_after_over_aten": max(after),
                         "max_before_over_aten": max(before)}  # fmt: skip
            if floor:
                out[name]["floor_copy_over_aten"] = _ratio(floor, "after_us")
            continue
        med = statistics.median(after)
        out[name] = {"median_after_over_eager": med,
                     "median_before_over_eager": statistics.median(before),
                     "max_after_over_eager": max(after)}  # fmt: skip
        if floor:
            out[name]["floor_over_eager"] = f = _ratio(floor, "after_us")
            out[name]["median_over_floor"] = med / f
    return out


def bounds(data: dict) -> dict:
    s, out = data.get("summary", {}), {}
    if nv := s.get("nvidia"):
        out[f"nvidia median after/eager <= {NVIDIA_MEDIAN_BOUND}"] = (
            nv["median_after_over_eager"] <= NVIDIA_MEDIAN_BOUND
        )
        out[f"nvidia each after/eager <= {NVIDIA_MAX_BOUND}"] = (
            nv["max_after_over_eager"] <= NVIDIA_MAX_BOUND
        )
    for name in KUNLUNXIN_BACKENDS:
        if name in s:
            out[f"{name} each after/aten <= {COPY_BOUND}"] = (
                s[name]["max_after_over_aten"] <= COPY_BOUND
            )
    for name, m in data.get("misses", {}).items():
        out[f"misses {name} cached/uncached <= {MISS_BOUND:.2f}"] = (
            m["ratio"] <= MISS_BOUND
        )
    return out


def with_run(data: dict, backend: str, rows: list, run: dict, commit) -> dict:
    """``data`` with ``backend``'s rows and run replaced (op ``commit``), summary and
    bounds recomputed (another op's starts dropped)."""
    keep = [r for r in data.get("ops", []) if r["backend"] != backend]
    if data.get("op_commit") != commit:  # another op's starts do not carry over
        data.pop("starts", None)
    data["op_commit"], data["measured_paths"] = commit, list(OP_FILES)
    data["ops"] = keep + rows
    data.setdefault("runs", {})[backend] = run
    data["summary"] = summarize(data["ops"])
    data["bounds"] = bounds(data)
    return data


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="copyfix.measure.launch_cost")
    add = parser.add_argument
    add("backend", choices=["nvidia", *KUNLUNXIN_BACKENDS])
    add("--out", type=Path, required=True)
    add("--calls", type=int, default=300)
    add("--rounds", type=int, default=15)
    add("--processes", type=int, default=1, help="fresh worker processes, combined")
    args = parser.parse_args(argv)
    if args.processes > 1:
        rows, run = _in_processes(args)
    else:
        rows, run = measure(args.backend, args.calls, args.rounds)
    commit = provenance.op_commit(*OP_FILES)
    data = records.update(
        args.out, lambda data: with_run(data, args.backend, rows, run, commit)
    )
    print(json.dumps(data["summary"], indent=1))
    return 0


def report_lines(path: Path = REPO / "results" / "launch_cache_h200.json") -> list[str]:
    """The host-cost section of docs/PERFORMANCE_ACCURACY.md, from ``path``."""
    if not path.is_file():
        return []
    data = json.loads(path.read_text())
    s = data["summary"]
    lines = ["", f"## Host cost per call, before and after PR 7 (`results/{path.name}`)", ""]  # fmt: skip
    for backend, run in data["runs"].items():
        workers = "."
        if run.get("processes", 1) > 1:
            workers = (f"; in {run['processes']} worker processes, each ratio the "
                       "median of the processes' own ratios.")  # fmt: skip
        lines.append(
            f"- {backend}: {run['machine']}, mode `{run['mode']}`, torch {run['torch']}, "
            f"triton {run['triton']}, base {run['flag_gems_base']}; "
            f"{run['rounds']} alternating rounds of {run['calls_per_round']} calls, median"
            + workers
        )
    lines += [
        f"- op `{(data.get('op_commit') or 'unknown')[:12]}`, {data.get('date', '')}. "
        "eager: torch without FlagGems; before: the base's own `pointwise_dynamic` "
        "and `where.py` (no PR 6 or 7), same process; after: PRs 6 and 7, cache on; cache off: PR 7 with "
        "`FLAGGEMS_LAUNCH_CACHE` off. µs per call, 64x64 fp32, calls back to back.",
        "",
        "| backend | op | eager µs | before µs | after µs | cache off µs "
        "| before/eager | after/eager | after = before, bit for bit |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in data["ops"]:
        same = {None: "n/a", True: "yes", False: "**NO**"}[r.get("after_and_off_bit_exact_vs_before")]  # fmt: skip
        lines.append(
            f"| {r['backend']} | {r['name']} | {r['eager_us']:.1f} | {r['before_us']:.1f} "
            f"| {r['after_us']:.1f} | {r.get('cache_off_us', r['after_us']):.1f} "
            f"| {_ratio(r, 'before_us'):.2f} | {_ratio(r, 'after_us'):.2f} | {same} |"
        )
    per_process = [r for r in data["ops"] if r.get("per_process")]
    if per_process:
        lines += ["", "after/eager in each worker process (the table: their median):", ""]  # fmt: skip
    for r in per_process:
        each = ", ".join(f"{p['after_us'] / p['eager_us']:.2f}" for p in r["per_process"])  # fmt: skip
        lines.append(f"- {r['backend']} {r['name']}: {each}")
    nv, kx = s.get("nvidia", {}), s.get("kunlunxin-emulated", {})
    nan = float("nan")
    if nv:
        lines += [
            "",
            f"nvidia, 9 ops: median after/eager {nv['median_after_over_eager']:.2f} "
            f"(before {nv['median_before_over_eager']:.2f}), max "
            f"{nv['max_after_over_eager']:.2f}; floor/eager "
            f"{nv.get('floor_over_eager', nan):.2f}; median over the floor "
            f"{nv.get('median_over_floor', nan):.2f}.",
        ]
    if kx:
        floor = "."
        if "floor_copy_over_aten" in kx:
            floor = (f"; floor_copy/aten {kx['floor_copy_over_aten']:.2f} (an in-place "
                     "`torch.library` op launching a compiled Triton copy, contiguous).")  # fmt: skip
        lines.append(
            f"kunlunxin-emulated copy_: after/aten at most {kx['max_after_over_aten']:.2f} "
            f"(before {kx['max_before_over_aten']:.2f})" + floor
        )
    if misses := data.get("misses"):
        each = ", ".join(f"{k} {v['ratio']:.3f}" for k, v in misses.items())
        lines.append(f"Calls that do not hit, cached/uncached (same start): {each}.")
    return lines + starts_lines(data)


def start_entry(record: dict) -> dict:
    """A machine start's ``starts`` entry from its record: date, per KunlunXIN
    integration the :data:`STRIDED` rows' after/aten, NVIDIA's median after/eager."""
    entry = {"date": record.get("date", "")}
    cpus = {tuple(run.get("cpus_allowed") or ()) for run in record["runs"].values()}
    if len(cpus) == 1 and len(next(iter(cpus))) == 1:  # every backend pinned to one CPU
        entry["pinned_cpu"] = next(iter(cpus))[0]
    for backend in KUNLUNXIN_BACKENDS:
        rows = {r["name"]: r for r in record["ops"] if r["backend"] == backend}
        if all(name in rows for name in STRIDED):
            entry[backend] = [_ratio(rows[name], "after_us") for name in STRIDED]
    nvidia = record.get("summary", {}).get("nvidia", {})
    if "median_after_over_eager" in nvidia:
        entry["nvidia"] = nvidia["median_after_over_eager"]
    return entry


def starts_summary(each: list[dict]) -> dict:
    """The record's ``starts``: the entries ``each`` (the record's own first), and the
    median and min-max over them of each figure."""
    out = {
        "what": "every five-process machine start on this op (this record's first): per "
        "KunlunXIN integration the strided copy_ after/aten (layouts in order of "
        "'layouts'), and nvidia's median after/eager over its ops; median and min-max "
        "over the starts",
        "layouts": list(STRIDED), "each": each, "median": {}, "range": {},
    }  # fmt: skip
    for backend in KUNLUNXIN_BACKENDS:
        cols = list(zip(*(e[backend] for e in each if backend in e)))
        if cols:
            out["median"][backend] = [statistics.median(c) for c in cols]
            out["range"][backend] = [[min(c), max(c)] for c in cols]
    if nvidia := [e["nvidia"] for e in each if "nvidia" in e]:
        out["median"]["nvidia"] = statistics.median(nvidia)
        out["range"]["nvidia"] = [min(nvidia), max(nvidia)]
    return out


def add_start(data: dict) -> dict:
    """``data`` (a five-process record, ``date`` set) with its own start first in
    ``starts`` (one of that date replaced)."""
    each = data.get("starts", {}).get("each", [])
    each = [e for e in each if e["date"] != data["date"]]
    return {**data, "starts": starts_summary([start_entry(data), *each])}


def _start_name(entry: dict) -> str:
    pinned = entry.get("pinned_cpu")
    return entry["date"] + ("" if pinned is None else f" pinned to CPU {pinned}")


def starts_lines(data: dict) -> list[str]:
    """The ``starts`` summary as a table, the bounds read on the median over starts."""
    st = data.get("starts")
    if not st or not st["median"]:
        return []
    lines = [
        "",
        f"Over the {len(st['each'])} five-process machine starts on op "
        f"`{(data.get('op_commit') or 'unknown')[:7]}` "
        f"({', '.join(map(_start_name, st['each']))}): KunlunXIN `copy_` after/aten "
        f"({' / '.join(st['layouts'])}; each <= {COPY_BOUND}), NVIDIA's median "
        f"after/eager over its ops (<= {NVIDIA_MEDIAN_BOUND}):",
        "",
        "| backend | median over starts | min-max over starts | median within the bound |",
        "|---|---|---|---|",
    ]
    for backend, med in st["median"].items():
        meds, spread = med, st["range"][backend]
        if not isinstance(med, list):
            meds, spread = [med], [spread]
        bound = NVIDIA_MEDIAN_BOUND if backend == "nvidia" else COPY_BOUND
        ok = all(r <= bound for r in meds)
        lines.append(
            f"| {backend} | {' / '.join(f'{r:.2f}' for r in meds)} "
            f"| {' / '.join(f'{lo:.2f}-{hi:.2f}' for lo, hi in spread)} "
            f"| {'yes' if ok else '**no**'} |"
        )
    return lines


if __name__ == "__main__":
    sys.exit(main())
