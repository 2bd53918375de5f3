"""Whether a host-cost ratio depends on the CPU it ran on (cuda emulation, lent machine).

    COPYFIX_EMULATION=cuda python -m copyfix.measure.affinity [--passes P] [--out F.json]

The H200's worker processes of one machine start measured aten's 64x64 copy_ at about
6-7 us in some processes and 9-10 us in others, and the KunlunXIN ``copy_``'s ratio to
it rose with it (``launch_cost.phase_table``).  This asks whether that is a property of
the CPU a process lands on: in one process, for each CPU it may run on, in turn, its
main thread is pinned to that CPU alone (``os.sched_setaffinity``) and the strided rows
of ``launch_cost`` are timed there, aten's ``copy_`` (no FlagGems) against the same call
under ``use_gems(include=["copy_"])``, in alternating rounds (``Timer.host_us_interleaved``).
``--passes`` walks the CPUs that many times, so a CPU's figure can be told from a
moment's.  The machine's CPU topology (from /sys and /proc/cpuinfo) is recorded beside.

:func:`pick` names the CPU a pinned run should use: the lowest median aten time, aten's
alone (the reference), never the ratio, so the choice does not select on the outcome.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
from pathlib import Path


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def topology(root: Path = Path("/sys/devices/system")) -> dict:
    """The CPUs this process may use, and for each the core, package, SMT siblings and
    NUMA node the kernel shows (None where it shows nothing); the NUMA nodes' CPU lists;
    the CPU model and each CPU's MHz from /proc/cpuinfo."""
    cpus = sorted(os.sched_getaffinity(0))
    per_cpu = {}
    for cpu in cpus:
        top = root / "cpu" / f"cpu{cpu}" / "topology"
        nodes = sorted((root / "cpu" / f"cpu{cpu}").glob("node[0-9]*"))
        per_cpu[cpu] = {
            "core_id": _read(top / "core_id"),
            "package": _read(top / "physical_package_id"),
            "siblings": _read(top / "thread_siblings_list"),
            "node": nodes[0].name if nodes else None,
        }
    nodes = {
        p.name: _read(p / "cpulist") for p in sorted((root / "node").glob("node[0-9]*"))
    }
    info = _read(Path("/proc/cpuinfo")) or ""
    models = sorted({ln.split(":", 1)[1].strip() for ln in info.splitlines()
                     if ln.startswith("model name")})  # fmt: skip
    mhz = [
        float(ln.split(":", 1)[1])
        for ln in info.splitlines()
        if ln.startswith("cpu MHz")
    ]
    return {"cpus": cpus, "per_cpu": per_cpu, "numa_nodes": nodes,
            "models": models, "mhz": mhz}  # fmt: skip


def sweep(cases: dict, gems, timer, cpus, passes: int, rounds: int, calls: int):
    """For each pass and CPU: the main thread pinned there, each case's aten and gems
    µs in alternating rounds.  Rows {pass, cpu, case: {aten, gems, ratio}}."""
    null = contextlib.nullcontext
    allowed = os.sched_getaffinity(0)
    rows = []
    try:
        for p in range(passes):
            for cpu in cpus:
                os.sched_setaffinity(0, {cpu})
                columns = {}
                for name, fn in cases.items():
                    columns[f"{name}/aten"] = (null, fn)
                    columns[f"{name}/gems"] = (gems, fn)
                us = timer.host_us_interleaved(columns, rounds=rounds, calls=calls)
                row = {"pass": p, "cpu": cpu}
                for name in cases:
                    aten, ours = us[f"{name}/aten"], us[f"{name}/gems"]
                    row[name] = {"aten": aten, "gems": ours, "ratio": ours / aten}
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        os.sched_setaffinity(0, allowed)
    return rows


def per_cpu(rows: list) -> dict:
    """cpu -> median over passes and cases of aten µs and of the ratio, and the
    passes' own medians (aten µs), so a CPU's figure can be told from a moment's."""
    out = {}
    for cpu in sorted({r["cpu"] for r in rows}):
        mine = [r for r in rows if r["cpu"] == cpu]
        names = [k for k in mine[0] if k not in ("pass", "cpu")]
        aten = [r[n]["aten"] for r in mine for n in names]
        ratio = [r[n]["ratio"] for r in mine for n in names]
        passes = [statistics.median(r[n]["aten"] for n in names) for r in mine]
        out[cpu] = {
            "aten_us": statistics.median(aten),
            "ratio": statistics.median(ratio),
            "max_ratio": max(ratio),
            "aten_us_by_pass": passes,
        }
    return out


def pick(rows: list) -> int:
    """The CPU of the lowest median aten µs (ties: the lower number)."""
    table = per_cpu(rows)
    return min(table, key=lambda cpu: (table[cpu]["aten_us"], cpu))


def samples(data: dict) -> list[tuple[float, float]]:
    """(aten µs, ratio) of every process, pass, CPU and strided row in ``data``."""
    return [
        (row[name]["aten"], row[name]["ratio"])
        for proc in data["processes"]
        for row in proc["rows"]
        for name in row
        if name not in ("pass", "cpu")
    ]


def flips(data: dict, slow_us: float) -> tuple[int, int]:
    """(CPUs whose pass medians of aten µs fall on both sides of ``slow_us`` over every
    process and pass, CPUs measured): a CPU fast in one pass and slow in another."""
    by_cpu = {}
    for proc in data["processes"]:
        for cpu, v in proc["per_cpu"].items():
            by_cpu.setdefault(cpu, []).extend(v["aten_us_by_pass"])
    both = sum(1 for v in by_cpu.values() if min(v) < slow_us and max(v) >= slow_us)
    return both, len(by_cpu)


BINS = (7.0, 8.0, 9.0, 10.0)  # aten µs: the bins' upper edges (the last bin open)


def report_lines(path: Path) -> list[str]:
    """docs/PERFORMANCE_ACCURACY.md's section on the affinity record."""
    from copyfix.measure.launch_cost import ATEN_SLOW_US, COPY_BOUND

    if not path.is_file():
        return []
    data = json.loads(path.read_text())
    both, cpus = flips(data, ATEN_SLOW_US)
    picks = [p["pick"] for p in data["processes"]]
    lines = [
        "",
        f"### The CPU a process runs on (`results/{path.name}`, op "
        f"`{(data.get('op_commit') or 'unknown')[:7]}`)",
        "",
        f"{data['machine']}, {data['date']}: `{data['command']}`. "
        f"{data['what']}. {len(data['processes'])} processes x "
        f"{data['processes'][0]['passes']} passes x {cpus} CPUs.",
        "",
        f"- {both} of {cpus} CPUs were fast (aten below {ATEN_SLOW_US:g} µs) in one pass "
        "and slow in another: a CPU's speed does not last; each process picked another "
        f"CPU ({', '.join(map(str, picks))}).",
        "- The ratio follows aten's own time, the host's speed at that moment, on "
        "whichever CPU (every process, pass, CPU and strided row):",
        "",
        "| aten µs | samples | within 2.5x | median ratio | max |",
        "|---|---:|---:|---:|---:|",
    ]
    pairs, low = samples(data), 0.0
    for high in (*BINS, float("inf")):
        group = [r for a, r in pairs if low <= a < high]
        name = f"{low:g}-{high:g}" if high != float("inf") else f">= {low:g}"
        if group:
            lines.append(
                f"| {name if low else f'< {high:g}'} | {len(group)} "
                f"| {sum(r <= COPY_BOUND for r in group)} "
                f"| {statistics.median(group):.2f} | {max(group):.2f} |"
            )
        low = high
    return lines


def measure(passes: int, rounds: int, calls: int) -> dict:
    from copyfix.measure.launch_cost import strided_copy_rows
    from copyfix.measure.timing import Timer, run_info

    mode, torch, _, cases, gems = strided_copy_rows()
    timer = Timer(torch, torch.cuda.is_available())
    rows = sweep(cases, gems, timer, topology()["cpus"], passes, rounds, calls)
    return {
        "what": "python -m copyfix.measure.affinity: the strided copy_ rows of "
        "launch_cost (aten vs use_gems(include=['copy_'])), main thread pinned to one "
        "CPU at a time, alternating rounds; pick = lowest median aten us",
        **run_info(torch, mode, rounds, calls),
        "passes": passes,
        "topology": topology(),
        "rows": rows,
        "per_cpu": per_cpu(rows),
        "pick": pick(rows),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="copyfix.measure.affinity")
    p.add_argument("--out", type=Path)
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument(
        "--pick-from",
        type=Path,
        help="print the pick over every process recorded in this file, measure nothing",
    )
    args = p.parse_args(argv)
    if args.pick_from:
        data = json.loads(args.pick_from.read_text())
        print(pick([r for proc in data["processes"] for r in proc["rows"]]))
        return 0
    from copyfix.measure.launch_cost import _op_commit
    from copyfix.measure.timing import add_process

    # (on the device, op_commit comes from COPYFIX_OP_COMMIT)
    result = {
        **measure(args.passes, args.rounds, args.calls),
        "op_commit": _op_commit(),
    }
    if args.out:
        add_process(args.out, result)
    print(f"PICK {result['pick']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
