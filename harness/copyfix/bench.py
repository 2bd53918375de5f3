"""`make bench`: copy_ performance and accuracy matrix in the best available mode.

    python -m copyfix.bench [--sides 256 1024 2048]   # measure, write JSON, regenerate report
    python -m copyfix.bench report                    # regenerate docs from results/*.json

Writes results/copy_perf_accuracy_<device>.json (one record per case), then
docs/PERFORMANCE_ACCURACY.md and docs/copy_perf_<device>.png.  Device times:
triton.testing.do_bench; host cost: wall time per call of a small copy issued back to
back.  Launches and fallbacks are counted with spies, every result compared bit for
bit with torch on the host.  On a KunlunXIN runner (native mode) aten's strided copy
is expected to fail: recorded per case (aten_error).
"""

import argparse
import json
import sys
from pathlib import Path

from copyfix import emulation, tracking
from copyfix.measure.timing import Timer
from copyfix.records import write as write_record

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "results"
DOCS = REPO / "docs"
FLOAT_DTYPES = ("float16", "bfloat16", "float32")
# a 4K-element copy: the device finishes it long before the host issues the next
HOST_SIDE = 64


def _layouts(torch):
    """The perf matrix's layouts: name -> (side, src dtype, dst dtype, device) -> (dst, src)
    (aten's own strided copy is timed too, where the device has one)."""

    def rand(shape, dtype, device):
        return torch.randn(shape, device=device).to(dtype)

    def empty(shape, dtype, device):
        return torch.empty(shape, dtype=dtype, device=device)

    return {
        "contiguous": lambda n, sd, dd, dev: (empty((n, n), dd, dev), rand((n, n), sd, dev)),
        "expand_row": lambda n, sd, dd, dev: (
            empty((n, n), dd, dev), rand((n,), sd, dev).expand(n, n)),
        "sdpa_mask": lambda n, sd, dd, dev: (
            empty((2, 8, n // 4, n // 4), dd, dev),
            rand((2, 1, 1, n // 4), sd, dev).expand(2, 8, n // 4, n // 4)),
        "transpose": lambda n, sd, dd, dev: (empty((n, n), dd, dev), rand((n, n), sd, dev).t()),
        "step_slice": lambda n, sd, dd, dev: (
            empty((n, n), dd, dev), rand((2 * n, 2 * n), sd, dev)[::2, ::2]),
        "permute4d": lambda n, sd, dd, dev: (
            empty((2, 8, n // 4, n // 4), dd, dev),
            rand((2, n // 4, 8, n // 4), sd, dev).permute(0, 2, 1, 3)),
        "composite": lambda n, sd, dd, dev: (
            empty((n, n), dd, dev), rand((n, 2 * n), sd, dev).t()[::2]),
        "strided_dst": lambda n, sd, dd, dev: (
            empty((n, n), dd, dev).t(), rand((n, n), sd, dev)),
    }  # fmt: skip


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
# the KunlunXIN op's files: copy.py and the module its Triton path lives in
OP_FILES = (COPY_PY, COPY_PY.replace("/copy.py", "/strided_copy.py"))


def op_identity() -> dict:
    """Which op was measured: the last commit of its files (or $COPYFIX_OP_COMMIT) and
    copy.py's sha256."""
    import hashlib

    from copyfix import provenance

    digest = hashlib.sha256((REPO / COPY_PY).read_bytes()).hexdigest()
    return {**provenance.measured(*OP_FILES), "op_sha256": digest}


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
    sides = args.sides or ([64] if mode == "cpu" else [256, 1024, 2048, 3072])
    casts = [("float32", "bfloat16"), ("float32", "float16")]
    pairs = [(d, d) for d in FLOAT_DTYPES] + casts
    records = []
    # interpreter timings say nothing about a device: keep them out of results/
    out_dir = RESULTS if on_device else REPO / "build" / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"copy_perf_accuracy_{slug}.json"
    for src_name, dst_name in pairs:
        sd, dd = getattr(torch, src_name), getattr(torch, dst_name)
        names = list(layouts) if sd == dd else CAST_LAYOUTS
        for layout in names:
            probe_dst, probe_src = layouts[layout](HOST_SIDE, sd, dd, device)
            aten_host = _aten_or_none(
                lambda: timer.host_us(lambda: probe_dst.copy_(probe_src))
            )
            with flag_gems.use_gems(include=["copy_"]):
                gems_host = timer.host_us(lambda: probe_dst.copy_(probe_src))
            for side in sides:
                dst, src = layouts[layout](side, sd, dd, device)
                with (
                    tracking.track(mod) as paths,
                    flag_gems.use_gems(include=["copy_"]),
                ):
                    dst.copy_(src)
                ref = torch.empty(dst.shape, dtype=dd).copy_(host_view(torch, src))
                got = host_view(torch, dst).contiguous().view(torch.uint8)
                bit_exact = bool(torch.equal(got, ref.view(torch.uint8)))
                aten_ms = _aten_or_none(lambda: timer.device_ms(lambda: dst.copy_(src)))
                with flag_gems.use_gems(include=["copy_"]):
                    gems_ms = timer.device_ms(lambda: dst.copy_(src))
                # the strided path's kernel on the views themselves (src broadcast)
                kernel = mod.copy_slice.instantiate(dst.dim())
                sv = src.as_strided(dst.shape, src.expand(dst.shape).stride())
                direct_ms = timer.device_ms(lambda: kernel(sv, out0=dst))
                numel = dst.numel()
                moved = numel * (src.element_size() + dst.element_size())
                ranks = paths.ranks
                records.append({
                    "mode": mode, "device": device_name, "versions": versions,
                    "layout": layout,
                    "src_shape": list(src.shape), "src_stride": list(src.stride()),
                    "dst_shape": list(dst.shape), "dst_stride": list(dst.stride()),
                    "src_dtype": src_name, "dst_dtype": dst_name, "numel": numel,
                    "aten_ms": aten_ms["value"], "aten_error": aten_ms["error"],
                    "gems_ms": gems_ms, "direct_ms": direct_ms,
                    "aten_host_us": aten_host["value"], "gems_host_us": gems_host,
                    "host_launch_path": "generated wrapper (LibEntry.run)", **op,
                    "host_probe_numel": probe_dst.numel(),
                    "gbps": moved / (gems_ms * 1e-3) / 1e9,
                    "launches": len(ranks), "fallbacks": paths.fallbacks,
                    "rank_after_coalescing": ranks[0] if ranks else None,
                    "bit_exact": bit_exact,
                })  # fmt: skip
                r = records[-1]
                # (a cut-off run keeps its rows)
                write_record(out, records)
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
    ok = all(
        r["launches"] == 1 and not r["fallbacks"] and r["bit_exact"] for r in records
    )
    return 0 if ok else 1


def _aten_or_none(fn):
    try:
        return {"value": fn(), "error": None}
    except Exception as exc:  # on KunlunXIN aten's strided copy is what fails
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        return {"value": None, "error": error}


def _fmt(v, spec=".4f"):
    return "n/a" if v is None else format(v, spec)


def _over(a, b):
    return "n/a" if b is None else f"{a / b:.2f}"


def report():
    """docs/PERFORMANCE_ACCURACY.md (and one PNG per device) from results/*.json."""
    files = sorted(RESULTS.glob("copy_perf_accuracy_*.json"))
    sources = [*files, RESULTS / "launch_cache_h200.json", RESULTS / "decode_h200.json"]
    lines = [
        "# copy_ performance and accuracy (generated)",
        "",
        "Generated by `python -m copyfix.bench report` from "
        + ", ".join(f"`results/{f.name}`" for f in sources if f.exists())
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
    if not files:
        lines += ["", "No copy_ device-time record stands at the current op (a record "
                  "leaves `results/` when the op it measured changes): `make bench` on a GPU "
                  "(`harness/device/run.sh bench`) makes one."]  # fmt: skip
    for f in files:
        records = json.loads(f.read_text())
        if not records:
            continue
        r0, v = records[0], records[0]["versions"]
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
            ratio = _over(r["gems_ms"], r["aten_ms"])
            lines.append(
                f"| {r['layout']} | {r['src_dtype']}→{r['dst_dtype']} | {r['numel']} | "
                f"{r['rank_after_coalescing']} | {r['launches']} | {r['fallbacks']} | "
                f"{_fmt(r['aten_ms'])} | {r['gems_ms']:.4f} | {r['direct_ms']:.4f} | {ratio} | "
                f"{r['gbps']:.0f} | {'yes' if r['bit_exact'] else '**NO**'} |"
            )
        host = {}  # (the first record of each layout and dtypes)
        for r in records:
            host.setdefault((r["layout"], r["src_dtype"], r["dst_dtype"]), r)
        ops = sorted({(r.get("op_commit") or "unknown")[:7] for r in records})
        paths = sorted({r.get("host_launch_path") or "unknown" for r in records})
        lines += [
            "",
            f"Host cost per call ({HOST_SIDE}x{HOST_SIDE} copies), of op "
            f"{', '.join(f'`{o}`' for o in ops)} (launch path: {'; '.join(paths)}). "
            "The host cost of later ops is in the PR 7 section below.",
            "",
            "| layout | dtypes | aten µs | gems µs | gems/aten |",
            "|---|---|---:|---:|---:|",
        ]
        for (layout, sd, dd), r in host.items():
            ratio = _over(r["gems_host_us"], r["aten_host_us"])
            lines.append(
                f"| {layout} | {sd}→{dd} | {_fmt(r['aten_host_us'], '.1f')} | {r['gems_host_us']:.1f} | {ratio} |"
            )
        png = _plot(records, f.stem.replace("copy_perf_accuracy_", ""))
        if png:
            lines += ["", f"![time per layout]({png.name})"]
    # (PR 7: the host cost of every op; a Llama decode end to end)
    from copyfix.measure import decode, launch_cost

    lines += launch_cost.report_lines() + decode.report_lines()
    (DOCS / "PERFORMANCE_ACCURACY.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {DOCS / 'PERFORMANCE_ACCURACY.md'}")


def _plot(records, slug):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    biggest = max(r["numel"] for r in records)
    rows = [r for r in records if r["numel"] == biggest]
    rows = [r for r in rows if r["src_dtype"] == r["dst_dtype"] == "float32"]
    if not rows:
        return None
    xs, width = range(len(rows)), 0.27
    fig, ax = plt.subplots(figsize=(10, 4))
    bars = (("aten_ms", "aten copy_"), ("gems_ms", "flag_gems copy_"),
            ("direct_ms", "direct kernel"))  # fmt: skip
    for i, (key, label) in enumerate(bars):
        xi = [x + (i - 1) * width for x in xs]
        ax.bar(xi, [r[key] or 0 for r in rows], width, label=label)
    ax.set_xticks(list(xs), [r["layout"] for r in rows], rotation=20)
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="copyfix.bench")
    parser.add_argument(
        "cmd", nargs="?", default="measure", choices=("measure", "report")
    )
    parser.add_argument("--sides", type=int, nargs="*")
    args = parser.parse_args(argv)
    return measure(args) if args.cmd == "measure" else report() or 0


if __name__ == "__main__":
    sys.exit(main())
