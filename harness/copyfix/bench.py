"""`make bench`: copy_ performance and accuracy matrix in the best available mode.

    python -m copyfix.bench [--quick] [--sides 256 1024 2048]   # measure, write JSON, regenerate report
    python -m copyfix.bench report                              # regenerate docs from results/*.json
    python -m copyfix.bench host [--profile]                    # host cost per call (and where it goes)

Writes results/copy_perf_accuracy_<device>.json (one record per case), then
docs/PERFORMANCE_ACCURACY.md and docs/copy_perf_<device>.png from every JSON in
results/. Device times: triton.testing.do_bench (CUDA events, warm-up, median).
Host cost: wall time per call of a small copy issued back to back, so the device
queue is not what is measured. Launches and fallbacks are counted with spies,
and every result is compared bit for bit with torch on the host.

The same command runs unchanged on a KunlunXIN runner (native mode), where it
produces the P800 table; there aten's strided copy is expected to fail, which is
recorded per case (aten_error) instead of aborting the run.
"""

import argparse
import contextlib
import cProfile
import functools
import io
import json
import pstats
import statistics
import sys
import time
import warnings
from pathlib import Path
from unittest import mock

from copyfix import emulation, tracking

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "results"
DOCS = REPO / "docs"
FLOAT_DTYPES = ("float16", "bfloat16", "float32")
HOST_SIDE = (
    64  # a 4K-element copy: the device finishes it long before the host issues the next
)


def _layouts(torch):
    """The perf matrix's layouts: name -> (side, src dtype, dst dtype, device) -> (dst, src).

    The PR benchmark (benchmark/test_copy_strided.py) runs on upstream's base.py with
    a contiguous-copy baseline; this harness matrix times aten's own strided copy too,
    which only a device that has it (the H200) can run.
    """

    def rand(shape, dtype, device):
        return torch.randn(shape, device=device).to(dtype)

    def empty(shape, dtype, device):
        return torch.empty(shape, dtype=dtype, device=device)

    return {
        "contiguous": lambda n, sd, dd, dev: (
            empty((n, n), dd, dev),
            rand((n, n), sd, dev),
        ),
        "expand_row": lambda n, sd, dd, dev: (
            empty((n, n), dd, dev),
            rand((n,), sd, dev).expand(n, n),
        ),
        "sdpa_mask": lambda n, sd, dd, dev: (
            empty((2, 8, n // 4, n // 4), dd, dev),
            rand((2, 1, 1, n // 4), sd, dev).expand(2, 8, n // 4, n // 4),
        ),
        "transpose": lambda n, sd, dd, dev: (
            empty((n, n), dd, dev),
            rand((n, n), sd, dev).t(),
        ),
        "step_slice": lambda n, sd, dd, dev: (
            empty((n, n), dd, dev),
            rand((2 * n, 2 * n), sd, dev)[::2, ::2],
        ),
        "permute4d": lambda n, sd, dd, dev: (
            empty((2, 8, n // 4, n // 4), dd, dev),
            rand((2, n // 4, 8, n // 4), sd, dev).permute(0, 2, 1, 3),
        ),
        "composite": lambda n, sd, dd, dev: (
            empty((n, n), dd, dev),
            rand((n, 2 * n), sd, dev).t()[::2],
        ),
        "strided_dst": lambda n, sd, dd, dev: (
            empty((n, n), dd, dev).t(),
            rand((n, n), sd, dev),
        ),
    }


CAST_LAYOUTS = ["expand_row", "sdpa_mask", "transpose"]


def host_view(torch, t):
    """`t` on the host through its storage (no device-side strided copy)."""
    n = t.untyped_storage().nbytes() // t.element_size()
    flat = (
        torch.empty(0, dtype=t.dtype, device=t.device)
        .set_(t.untyped_storage(), 0, (n,), (1,))
        .cpu()
    )
    return flat.as_strided(t.shape, t.stride(), t.storage_offset())


class Timer:
    def __init__(self, torch, on_device):
        self.torch, self.on_device = torch, on_device

    def device_ms(self, fn):
        if self.on_device:
            import triton

            return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    def host_us(self, fn, calls=300):
        """Median over 5 rounds of wall time per call, calls issued back to back."""
        sync = self.torch.cuda.synchronize if self.on_device else (lambda: None)
        for _ in range(20):
            fn()
        sync()
        rounds = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(calls if self.on_device else 3):
                fn()
            rounds.append(
                (time.perf_counter() - t0) / (calls if self.on_device else 3) * 1e6
            )
            sync()
        return statistics.median(rounds)

    def host_us_interleaved(self, columns, rounds=15, calls=300):
        """Median wall µs per call of each column, {name: (context, fn)}, measured in
        alternating rounds (each round every column once, in a rotating order) so a
        host whose speed drifts weighs on every column alike."""
        sync = self.torch.cuda.synchronize if self.on_device else (lambda: None)
        calls = calls if self.on_device else 3
        names = list(columns)
        times = {name: [] for name in names}
        for r in range(rounds if self.on_device else 2):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                context, fn = columns[name]
                with context():
                    for _ in range(20 if r == 0 else 3):
                        fn()
                    sync()
                    t0 = time.perf_counter()
                    for _ in range(calls):
                        fn()
                    times[name].append((time.perf_counter() - t0) / calls * 1e6)
                    sync()
        return {name: statistics.median(t) for name, t in times.items()}


def _device_slug(torch, mode):
    """Device name for result files, suffixed with the FlagGems base unless 5.0.2."""
    suffix = "" if emulation.BASE in (None, "5.0.2") else f"_{emulation.BASE}"
    if mode == "cpu":
        return "cpu-interpreter" + suffix
    name = torch.cuda.get_device_name()
    for key in ("H200", "H100", "A100", "P800"):
        if key in name.upper():
            return key.lower() + suffix
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-") + suffix


COPY_PY = "src/flag_gems/runtime/backend/_kunlunxin/ops/copy.py"


def op_identity() -> dict:
    """Which copy.py was measured: its last commit (git here, or $COPYFIX_OP_COMMIT
    where the tree travelled without .git) and the sha256 of the file itself."""
    import hashlib
    import os
    import subprocess

    commit = os.environ.get("COPYFIX_OP_COMMIT")
    if not commit:
        done = subprocess.run(
            ["git", "-C", str(REPO), "log", "-1", "--format=%H", "--", COPY_PY],
            capture_output=True,
            text=True,
        )
        commit = done.stdout.strip() or None
    digest = hashlib.sha256((REPO / COPY_PY).read_bytes()).hexdigest()
    return {"op_commit": commit, "op_sha256": digest}


def _wrapper_only(wrapper, src, dst):
    """Stands in for copy_'s _launch_and_record: copy, record nothing (fast path off)."""
    wrapper(src, out0=dst)


def _noop_copy_(dst, src, non_blocking=False):
    return dst


def _noop_launch(*args):
    pass


def _launch_only(runner, args, dst, src, non_blocking=False):
    runner(src, dst, *args)
    return dst


@contextlib.contextmanager
def _python_kernel_floor(torch, dispatch_key, kernel=_noop_copy_):
    """copy_ dispatched, as FlagGems registers it, to a Python kernel (by default one
    doing nothing)."""
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # overriding a registered kernel
        lib.impl("copy_", kernel, dispatch_key)
    try:
        yield
    finally:
        lib._destroy()


def _noop_launch_of(ours, key, launch):
    """Ours with the launch recorded for `key` made a no-op (a context manager)."""
    return mock.patch.dict(ours._launches, {key: (_noop_launch, *launch[1:])})


@contextlib.contextmanager
def _gems_noop_launch(gems, ours, key, launch):
    """copy_ dispatched to ours, with the launch recorded for `key` made a no-op."""
    with gems(), _noop_launch_of(ours, key, launch):
        yield


def _launch_path(ours) -> str:
    """Which launch path the last layout copy_ saw takes (after its first copy)."""
    if not hasattr(ours, "_launches"):  # the op launches through its wrapper
        return "generated wrapper (LibEntry.run)"
    entries = list(ours._launches.values())
    if not entries:
        return "no Triton launch"
    if all(e is not None for e in entries):
        return "fast launch (LibEntry's cached kernel, kernel[grid](*args))"
    return "generated wrapper (LibEntry.run)"


def measure(args):
    mode = emulation.activate()
    import torch

    import flag_gems

    versions, op = emulation.versions(), op_identity()
    mod, device = emulation.copy_module(), emulation.device()
    on_device = mode != "cpu"
    timer = Timer(torch, on_device)
    slug = _device_slug(torch, mode)
    device_name = (
        torch.cuda.get_device_name() if on_device else "CPU (Triton interpreter)"
    )
    layouts = _layouts(torch)
    cast_layouts = CAST_LAYOUTS
    sides = args.sides or ([64] if mode == "cpu" else [256, 1024, 2048, 3072])
    pairs = [(d, d) for d in FLOAT_DTYPES] + [
        ("float32", "bfloat16"),
        ("float32", "float16"),
    ]
    records = []
    # interpreter timings say nothing about a device: keep them out of results/
    out_dir = RESULTS if on_device else REPO / "build" / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"copy_perf_accuracy_{slug}.json"
    for src_name, dst_name in pairs:
        sd, dd = getattr(torch, src_name), getattr(torch, dst_name)
        names = list(layouts) if sd == dd else cast_layouts
        for layout in names:
            probe_dst, probe_src = layouts[layout](HOST_SIDE, sd, dd, device)
            aten_host = _aten_or_none(
                lambda: timer.host_us(lambda: probe_dst.copy_(probe_src))
            )
            with flag_gems.use_gems(include=["copy_"]):
                getattr(mod, "_launches", {}).clear()
                gems_host = timer.host_us(lambda: probe_dst.copy_(probe_src))
                host_path = _launch_path(mod)
            for side in sides:
                dst, src = layouts[layout](side, sd, dd, device)
                with (
                    tracking.track(mod) as paths,
                    flag_gems.use_gems(include=["copy_"]),
                ):
                    dst.copy_(src)
                ref = torch.empty(dst.shape, dtype=dd)
                ref.copy_(host_view(torch, src))
                got = host_view(torch, dst)
                bit_exact = bool(
                    torch.equal(
                        got.contiguous().view(torch.uint8), ref.view(torch.uint8)
                    )
                )
                aten_ms = _aten_or_none(lambda: timer.device_ms(lambda: dst.copy_(src)))
                with flag_gems.use_gems(include=["copy_"]):
                    gems_ms = timer.device_ms(lambda: dst.copy_(src))
                # the launch plan copy_ itself uses (coalesced, src strides broadcast)
                if hasattr(mod, "_layout"):  # op 847c5a4 and earlier: coalesced
                    plan = mod._layout(dst.shape, dst.stride(), src.shape, src.stride())
                    shape, dst_strides, src_strides = plan[3][:3]
                else:  # the op launches on the views themselves
                    shape, dst_strides = dst.shape, dst.stride()
                    src_strides = src.expand(dst.shape).stride()
                # the strided path's kernel (copy_slice's config since op 0b98bf2)
                direct = mod._copy_kernel if hasattr(mod, "_layout") else mod.copy_slice
                kernel = direct.instantiate(len(shape))
                dv = dst.as_strided(shape, dst_strides)
                sv = src.as_strided(shape, src_strides)
                direct_ms = timer.device_ms(lambda: kernel(sv, out0=dv))
                numel = dst.numel()
                moved = numel * (src.element_size() + dst.element_size())
                records.append(
                    {
                        "mode": mode,
                        "device": device_name,
                        "versions": versions,
                        "layout": layout,
                        "src_shape": list(src.shape),
                        "src_stride": list(src.stride()),
                        "dst_shape": list(dst.shape),
                        "dst_stride": list(dst.stride()),
                        "src_dtype": src_name,
                        "dst_dtype": dst_name,
                        "numel": numel,
                        "aten_ms": aten_ms["value"],
                        "aten_error": aten_ms["error"],
                        "gems_ms": gems_ms,
                        "direct_ms": direct_ms,
                        "aten_host_us": aten_host["value"],
                        "gems_host_us": gems_host,
                        "host_launch_path": host_path,
                        **op,
                        "host_probe_numel": probe_dst.numel(),
                        "gbps": moved / (gems_ms * 1e-3) / 1e9,
                        "launches": len(paths.ranks),
                        "fallbacks": paths.fallbacks,
                        "rank_after_coalescing": paths.ranks[0]
                        if paths.ranks
                        else None,
                        "bit_exact": bit_exact,
                    }
                )
                r = records[-1]
                out.write_text(
                    json.dumps(records, indent=1) + "\n"
                )  # a cut-off run keeps its rows
                print(
                    f"{layout:11s} {src_name}->{dst_name} n={numel:9d} rank={r['rank_after_coalescing']} "
                    f"launches={r['launches']} fallbacks={r['fallbacks']} exact={bit_exact} "
                    f"aten={_fmt(r['aten_ms'])} gems={gems_ms:.4f} direct={direct_ms:.4f} ms "
                    f"host aten={_fmt(r['aten_host_us'])} gems={gems_host:.1f} us",
                    flush=True,
                )
    print(f"wrote {out}")
    if on_device:
        report()
    bad = [
        r
        for r in records
        if not (r["launches"] == 1 and r["fallbacks"] == 0 and r["bit_exact"])
    ]
    return 1 if bad else 0


def _aten_or_none(fn):
    try:
        return {"value": fn(), "error": None}
    except (
        Exception
    ) as exc:  # on KunlunXIN aten's strided copy is the kernel that fails
        return {
            "value": None,
            "error": f"{type(exc).__name__}: {str(exc).splitlines()[0]}",
        }


def _fmt(v, spec=".4f"):
    return "n/a" if v is None else format(v, spec)


def report():
    """docs/PERFORMANCE_ACCURACY.md (and one PNG per device) from results/*.json."""
    files = sorted(RESULTS.glob("copy_perf_accuracy_*.json"))
    lines = [
        "# copy_ performance and accuracy (generated)",
        "",
        "Generated by `python -m copyfix.bench report` from "
        + ", ".join(f"`results/{f.name}`" for f in files)
        + "; do not edit by hand. `make bench` measures and regenerates it. On a KunlunXIN "
        "runner the same command runs in native mode and adds the P800 table "
        "(`results/copy_perf_accuracy_p800.json`); none has been run yet.",
        "",
        "Columns: device times are medians of `triton.testing.do_bench` (CUDA events); "
        "`aten` is torch's own copy_, `gems` the dispatched flag_gems copy_ (kunlunxin "
        "module), `direct` the generated kernel called on pre-coalesced views (no host "
        "checks). Host µs: wall time per call of the same layout at "
        f"{HOST_SIDE}x{HOST_SIDE}, calls issued back to back. GB/s counts the bytes of "
        "every logical element read and written. `exact`: bit-for-bit equal to torch on the host.",
    ]
    for f in files:
        records = json.loads(f.read_text())
        if not records:
            continue
        r0 = records[0]
        v = r0["versions"]
        lines += [
            "",
            f"## {r0['device']} — mode `{r0['mode']}`",
            "",
            f"torch {v['torch']}, triton {v['triton']}, flag_gems {v['flag_gems']}. "
            f"{len(records)} cases: launches==1 in {sum(r['launches'] == 1 for r in records)}, "
            f"fallbacks==0 in {sum(r['fallbacks'] == 0 for r in records)}, "
            f"bit-exact in {sum(r['bit_exact'] for r in records)}.",
            "",
            "| layout | dtypes | numel | rank | launches | fallbacks | aten ms | gems ms | direct ms | "
            "gems/aten | GB/s | exact |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in records:
            ratio = (
                "n/a" if r["aten_ms"] is None else f"{r['gems_ms'] / r['aten_ms']:.2f}"
            )
            lines.append(
                f"| {r['layout']} | {r['src_dtype']}→{r['dst_dtype']} | {r['numel']} | "
                f"{r['rank_after_coalescing']} | {r['launches']} | {r['fallbacks']} | "
                f"{_fmt(r['aten_ms'])} | {r['gems_ms']:.4f} | {r['direct_ms']:.4f} | {ratio} | "
                f"{r['gbps']:.0f} | {'yes' if r['bit_exact'] else '**NO**'} |"
            )
        host = {}
        for r in records:
            host.setdefault((r["layout"], r["src_dtype"], r["dst_dtype"]), r)
        lines += [
            "",
            f"Host cost per call ({HOST_SIDE}x{HOST_SIDE} copies):",
            "",
            "| layout | dtypes | aten µs | gems µs | gems/aten |",
            "|---|---|---:|---:|---:|",
        ]
        for (layout, sd, dd), r in host.items():
            ratio = (
                "n/a"
                if r["aten_host_us"] is None
                else f"{r['gems_host_us'] / r['aten_host_us']:.2f}"
            )
            lines.append(
                f"| {layout} | {sd}→{dd} | {_fmt(r['aten_host_us'], '.1f')} | {r['gems_host_us']:.1f} | {ratio} |"
            )
        png = _plot(records, f.stem.replace("copy_perf_accuracy_", ""))
        if png:
            lines += ["", f"![time per layout]({png.name})"]
    for f in sorted(RESULTS.glob("copy_host_overhead_*.json")):
        data = json.loads(f.read_text())
        v = data["versions"]
        lines += [
            "",
            f"## Host cost per copy_ — {data['device']}, mode `{data['mode']}`, "
            f"FlagGems base {v['flag_gems']} (`results/{f.name}`)",
            "",
            f"torch {v['torch']}, triton {v['triton']}; {data['numel']}-element fp32 copies, "
            "wall µs per call, one run (`python -m copyfix.bench host`), op "
            f"`{(data.get('op_commit') or 'unknown')[:12]}`. Launch path taken: "
            f"{', '.join(data.get('launch_path', ['not recorded']))}. "
            f"Timing: {data.get('timing', 'median of 5 consecutive rounds per column')}.",
            "",
            "- *python dispatch floor*: `dst.copy_(src)` dispatched, as FlagGems "
            "registers it, to a Python kernel that does nothing;",
            "- *cached launch only*: LibEntry's cached kernel launched as LibEntry "
            "launches it, `kernel[grid](*args)`, with nothing around it;",
            "- *floor/aten*: the two together over aten, what any Python op that "
            "launches one Triton kernel through the public protocol pays at least;",
            "- *one launch, dispatched*: `dst.copy_(src)` dispatched to a Python kernel "
            "that only makes that cached launch: the floor of any such op, measured "
            "whole (device modes only);",
            "- *launch a no-op*: ours dispatched with its launch made a no-op; less the "
            "floor, what our checks cost in place;",
            "- *our checks only*: copy_ called directly with its launch made a no-op;",
            "- *fast path off*: the same copy_ with every layout left on the "
            "generated wrapper (LibEntry.run, JITFunction.run on a first launch).",
            "",
            "| layout | aten | ours dispatched | ours/aten | python dispatch floor "
            "| cached launch only | floor/aten | one launch, dispatched "
            "| launch a no-op | our checks only | fast path off "
            "| generated wrapper only | base copy_ |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for layout, row in data["host_us"].items():
            after, aten = row["ours dispatched"], row["aten"]
            dispatch = row.get("python dispatch floor")
            launch = row.get("cached launch only")
            floor = None if None in (dispatch, launch) else (dispatch + launch) / aten
            base_us = next((u for k, u in row.items() if k.startswith("base ")), None)
            lines.append(
                f"| {layout} | {aten:.1f} | {after:.1f} | {after / aten:.2f} | "
                f"{_fmt(dispatch, '.1f')} | {_fmt(launch, '.1f')} | "
                f"{_fmt(floor, '.2f')} | "
                f"{_fmt(row.get('one launch, dispatched'), '.1f')} | "
                f"{_fmt(row.get('ours dispatched, launch a no-op'), '.1f')} | "
                f"{_fmt(row.get('our checks only'), '.1f')} | "
                f"{_fmt(row.get('ours dispatched, fast path off'), '.1f')} | "
                f"{row['generated wrapper only']:.1f} | "
                f"{'n/a (aten path)' if base_us is None else f'{base_us:.1f}'} |"
            )
        if "median_dispatched_over_aten" in data:
            floor = data.get("median_floor_over_aten")
            launched = data.get("median_one_launch_dispatched_over_aten")
            lines += [
                "",
                f"Median ours dispatched / aten: {data['median_dispatched_over_aten']:.2f}"
                + ("" if floor is None else f"; median floor / aten: {floor:.2f}")
                + (
                    ""
                    if launched is None
                    else f"; median one launch, dispatched / aten: {launched:.2f}"
                )
                + ".",
            ]
    lines += _runs_table()
    (DOCS / "PERFORMANCE_ACCURACY.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {DOCS / 'PERFORMANCE_ACCURACY.md'}")


def _plot(records, slug):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    biggest = max(r["numel"] for r in records)
    rows = [
        r
        for r in records
        if r["numel"] == biggest and r["src_dtype"] == r["dst_dtype"] == "float32"
    ]
    if not rows:
        return None
    names = [r["layout"] for r in rows]
    xs = range(len(rows))
    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.27
    for i, (key, label) in enumerate(
        (
            ("aten_ms", "aten copy_"),
            ("gems_ms", "flag_gems copy_"),
            ("direct_ms", "direct kernel"),
        )
    ):
        ax.bar(
            [x + (i - 1) * width for x in xs],
            [r[key] or 0 for r in rows],
            width,
            label=label,
        )
    ax.set_xticks(list(xs), names, rotation=20)
    ax.set_ylabel("ms (median)")
    ax.set_title(
        f"copy_ fp32, {biggest} elements — {rows[0]['device']} ({rows[0]['mode']} mode)"
    )
    ax.legend()
    fig.tight_layout()
    DOCS.mkdir(exist_ok=True)
    png = DOCS / f"copy_perf_{slug}.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


def host(args):
    """Host µs per call: aten vs base kunlunxin copy_ vs ours, and a cProfile breakdown."""
    mode = emulation.activate()
    import torch

    import flag_gems

    on_device = mode != "cpu"
    timer = Timer(torch, on_device)
    device = emulation.device()
    ours, base = emulation.copy_module(), emulation.base_copy_module()
    a = torch.randn(HOST_SIDE, HOST_SIDE, device=device)
    cases = {
        "contiguous": (torch.empty_like(a), a),
        "expand_row": (torch.empty_like(a), a[0].expand(HOST_SIDE, HOST_SIDE)),
        "transpose": (torch.empty_like(a), a.t()),
    }
    print(f"mode={mode} {emulation.versions()}")
    base_key = f"base {emulation.BASE} copy_ (direct)"
    gems = lambda: flag_gems.use_gems(include=["copy_"])  # noqa: E731
    floor = lambda: _python_kernel_floor(  # noqa: E731
        torch, flag_gems.runtime.device.dispatch_key
    )
    rows, paths = {}, {}
    for name, (dst, src) in cases.items():
        if hasattr(ours, "_coalesce"):  # op 847c5a4 and earlier
            shape, ds, ss = ours._coalesce(tuple(dst.shape), dst.stride(), src.stride())
        else:
            shape, ds, ss = dst.shape, dst.stride(), src.stride()
        dv, sv = dst.as_strided(shape, ds), src.as_strided(shape, ss)
        wrapper = ours._copy_kernel.instantiate(len(shape))
        launches = getattr(ours, "_launches", {})
        with flag_gems.use_gems(include=["copy_"]):
            launches.clear()
            dst.copy_(src)  # the first copy records the launch of this layout
            paths[name] = _launch_path(ours)
        columns = {
            "aten": (contextlib.nullcontext, lambda: dst.copy_(src)),
            "ours dispatched": (gems, lambda: dst.copy_(src)),
            "python dispatch floor": (floor, lambda: dst.copy_(src)),
        }
        # the launch the first copy recorded, if any
        key, launch = next(iter(launches.items()), (None, None))
        if launch is not None:  # LibEntry's cached kernel, launched as LibEntry does
            runner, launch_args = launch[:2]
            columns["cached launch only"] = (
                contextlib.nullcontext,
                lambda: runner(sv, dv, *launch_args),
            )
            if on_device:  # (the interpreter's launch copies through copy_ itself)
                # a Python kernel that only launches it: the whole floor of any
                # FlagGems op that launches one Triton kernel
                columns["one launch, dispatched"] = (
                    functools.partial(
                        _python_kernel_floor,
                        torch,
                        flag_gems.runtime.device.dispatch_key,
                        functools.partial(_launch_only, runner, launch_args),
                    ),
                    lambda: dst.copy_(src),
                )
            # dispatched as above, its launch made a no-op: our checks in place
            columns["ours dispatched, launch a no-op"] = (
                functools.partial(_gems_noop_launch, gems, ours, key, launch),
                lambda: dst.copy_(src),
            )
        row = timer.host_us_interleaved(columns)
        with flag_gems.use_gems(include=["copy_"]):
            # the same copy_ with every layout left on the generated wrapper
            with (
                (
                    contextlib.nullcontext()
                    if launch is None
                    else mock.patch.object(ours, "_launch_and_record", _wrapper_only)
                ),
                mock.patch.dict(launches, clear=True),
            ):
                row["ours dispatched, fast path off"] = timer.host_us(
                    lambda: dst.copy_(src)
                )
        row["generated wrapper only"] = timer.host_us(lambda: wrapper(sv, out0=dv))
        if launch is not None:  # copy_ called directly, its launch made a no-op
            with _noop_launch_of(ours, key, launch):
                row["our checks only"] = timer.host_us(lambda: ours.copy_(dst, src))
        if src.is_contiguous():  # the base sends strided sources to aten
            row[base_key] = timer.host_us(lambda: base.copy_(dst, src))
        rows[name] = row
        print(
            f"{name:11s} [{paths[name]}] "
            + "  ".join(f"{k}={v:.1f}us" for k, v in row.items()),
            flush=True,
        )
    ratio = statistics.median(r["ours dispatched"] / r["aten"] for r in rows.values())
    floors = [
        (r["python dispatch floor"] + r["cached launch only"]) / r["aten"]
        for r in rows.values()
        if "cached launch only" in r
    ]
    floor = statistics.median(floors) if floors else None
    launched = [
        r["one launch, dispatched"] / r["aten"]
        for r in rows.values()
        if "one launch, dispatched" in r
    ]
    launched = statistics.median(launched) if launched else None
    print(f"median ours dispatched / aten = {ratio:.2f}")
    print(f"median (python dispatch floor + cached launch only) / aten = {floor}")
    print(f"median one launch, dispatched / aten = {launched}")
    if on_device:
        RESULTS.mkdir(exist_ok=True)
        out = RESULTS / f"copy_host_overhead_{_device_slug(torch, mode)}.json"
        out.write_text(
            json.dumps(
                {
                    "mode": mode,
                    "versions": emulation.versions(),
                    "device": torch.cuda.get_device_name(),
                    "numel": HOST_SIDE * HOST_SIDE,
                    "measured_at": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                    "launch_path": sorted(set(paths.values())),
                    "launch_path_per_layout": paths,
                    **op_identity(),
                    "median_dispatched_over_aten": round(ratio, 3),
                    "median_floor_over_aten": floor and round(floor, 3),
                    "median_one_launch_dispatched_over_aten": launched
                    and round(launched, 3),
                    "timing": "median of 15 interleaved rounds of 300 back-to-back "
                    "calls for aten, ours dispatched, python dispatch floor, cached "
                    "launch only and ours dispatched with the launch a no-op; 5 "
                    "consecutive rounds for the other columns",
                    "host_us": rows,
                },
                indent=1,
            )
            + "\n"
        )
        print(f"wrote {out}")
    if args.profile:
        dst, src = cases["transpose"]
        prof = cProfile.Profile()
        with flag_gems.use_gems(include=["copy_"]):
            prof.enable()
            for _ in range(2000):
                dst.copy_(src)
            prof.disable()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
        print(s.getvalue())
    return 0


RUNS = RESULTS / "copy_host_runs.json"


def add_runs(paths, at, note):
    """Record host runs (their JSONs, committed or not) in RUNS: one host run is
    one draw from a noisy host, and the spread between draws belongs with it."""
    runs = json.loads(RUNS.read_text()) if RUNS.is_file() else []
    for path in paths:
        data = json.loads(Path(path).read_text())
        floors = [r["python dispatch floor"] for r in data["host_us"].values()]
        when = data.get("measured_at") or at
        runs.append(
            {
                "measured_at": when,
                "order": 1 + sum(r["measured_at"] == when for r in runs),
                "device": data["device"],
                "versions": data["versions"],
                "op_commit": data.get("op_commit"),
                "median_dispatched_over_aten": data["median_dispatched_over_aten"],
                "median_floor_over_aten": data.get("median_floor_over_aten"),
                "median_one_launch_dispatched_over_aten": data.get(
                    "median_one_launch_dispatched_over_aten"
                ),
                "median_dispatch_floor_us": round(statistics.median(floors), 2),
                "note": note,
            }
        )
    RESULTS.mkdir(exist_ok=True)
    RUNS.write_text(json.dumps(runs, indent=1) + "\n")
    print(f"wrote {RUNS} ({len(runs)} runs)")


def _runs_table():
    if not RUNS.is_file():
        return []
    runs = json.loads(RUNS.read_text())
    lines = [
        "",
        f"## Host cost, run to run (`results/{RUNS.name}`)",
        "",
        "Every `bench host` run recorded with `python -m copyfix.bench runs`, the "
        "committed ones and the others alike, in the order they ran. The dispatch floor "
        "(a Python kernel that does nothing) measures the host's own state.",
        "",
        "| measured (UTC) | # | device | base | op | ours/aten | floor/aten "
        "| one launch, dispatched / aten | dispatch floor µs | note |",
        "|---|---:|---|---|---|---:|---:|---:|---:|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r['measured_at']} | {r['order']} | {r['device']} | "
            f"{r['versions']['flag_gems']} | `{(r['op_commit'] or 'unknown')[:8]}` | "
            f"{r['median_dispatched_over_aten']:.3f} | "
            f"{_fmt(r['median_floor_over_aten'], '.3f')} | "
            f"{_fmt(r.get('median_one_launch_dispatched_over_aten'), '.3f')} | "
            f"{r['median_dispatch_floor_us']:.2f} | {r['note']} |"
        )
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="copyfix.bench")
    parser.add_argument(
        "cmd",
        nargs="?",
        default="measure",
        choices=("measure", "report", "host", "runs"),
    )
    parser.add_argument("--sides", type=int, nargs="*")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("files", nargs="*", help="runs: host JSONs, in run order")
    parser.add_argument(
        "--at", help="runs: when their call began, for JSONs without measured_at"
    )
    parser.add_argument("--note", default="", help="runs: a note for each")
    args = parser.parse_args(argv)
    if args.cmd == "runs":
        add_runs(args.files, args.at, args.note)
        return 0
    if args.cmd == "report":
        report()
        return 0
    if args.cmd == "host":
        return host(args)
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
