"""The decode's section of docs/PERFORMANCE_ACCURACY.md, from its record."""

from __future__ import annotations

from pathlib import Path

from copyfix import records

RESULT = Path(__file__).resolve().parents[4] / "results" / "decode_h200.json"


def _process_counts(data: dict) -> str:
    """'base 1, composed 2, ...': the worker processes each variant ran in (one row per
    process and config: counted on the first config)."""
    rows = data.get("per_process", [])
    first = next(iter(data.get("configs", {})), None)
    names = list(dict.fromkeys(r["variant"] for r in rows))
    return ", ".join(
        f"{v} {sum(r['variant'] == v and r['config'] == first for r in rows)}"
        for v in names
    )


def report_lines(path: Path = RESULT) -> list[str]:
    """The decode section of docs/PERFORMANCE_ACCURACY.md, from ``path``."""
    data = records.load(path)
    if not data:
        return ["", "## A Llama decode end to end", "",
                "No decode record stands at the current op (a record leaves `results/` "
                "when the op it measured changes): `harness/device/decode.sh` on a GPU "
                "makes one."]  # fmt: skip
    if not data.get("configs"):
        return ["", f"## A Llama decode end to end (`results/{path.name}`)", "",
                f"- op `{(data.get('op_commit') or 'unknown')[:12]}`, {data.get('date', '')}: "
                f"no config finished; {len(data.get('workers_failed', []))} workers failed, "
                f"{len(data.get('workers_not_run', []))} not run. {data.get('note', '')}"]  # fmt: skip
    run = next(iter(data["runs"].values()), {})
    lines = [
        "",
        f"## A Llama decode end to end (`results/{path.name}`)",
        "",
        f"- {run.get('machine', '?')}, mode `{run.get('mode', '?')}`, torch {run.get('torch')}, "
        f"triton {run.get('triton')}, transformers {run.get('transformers')}; op "
        f"`{(data.get('op_commit') or 'unknown')[:12]}`, {data.get('date', '')}.",
        f"- transformers' `LlamaForCausalLM.generate`, random init, greedy; each variant in "
        f"fresh processes ({_process_counts(data)}), alternating, {data['rounds']} timed generates "
        "per column after a warm-up; eager timed in the same process. `x eager`: the "
        "variant's time per token over eager's in that process (2.0: twice eager's time), the "
        "median over processes.",
        "",
        "| config | eager tok/s | stock, x eager time | composed | cache off "
        "| hit rate | tokens equal (cache on = off) |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for name, c in data["configs"].items():
        shape = f"{name}: hidden {c['hidden']}, {c['layers']} layers, batch {c['batch']}, {c['new_tokens']} tokens"
        rate = (c.get("cache") or {}).get("hit_rate")
        same = c.get("tokens_equal_cache_off")
        cell = lambda k: f"{c[k]:.3f}" if k in c else "n/a"  # noqa: E731
        lines.append(
            f"| {shape} | {c['eager_tok_s']:.1f} | {cell('base_x_eager')} | {cell('composed_x_eager')} "
            f"| {cell('composed_cache_off_x_eager')} | {'n/a' if rate is None else f'{rate:.1%}'} "
            f"| {'n/a' if same is None else ('yes' if same else '**NO**')} |"
        )
    excluded = {
        op: why
        for r in data.get("per_process", [])
        for op, why in r["ops_excluded"].items()
    }
    lines += [""] + [
        f"- left out of `use_gems` on this backend: `{op}`: {why}."
        for op, why in excluded.items()
    ]
    lines += [f"- {data[k]}" for k in ("base_rows_note",) if k in data]
    kx = data.get("kunlunxin_emulated")
    if kx and "error" in kx:
        lines += ["", f"KunlunXIN emulated: did not finish ({kx['error']})."]
    elif kx:
        each = "; ".join(
            f"{c['config']}: tokens {'equal' if c['tokens_equal_device_model_off'] else '**differ**'} "
            f"with the model off, {'equal' if c['tokens_equal_cache_off'] else '**differ**'} with the cache off"
            + (
                ", left out: "
                + "; ".join(f"`{op}` ({why})" for op, why in c["ops_excluded"].items())
                if c["ops_excluded"]
                else ""
            )
            for c in kx["configs"]
        )
        lines += [
            "",
            f"KunlunXIN emulated (mode `{kx['mode']}`, every FlagGems op, device model on): "
            f"{kx['strided_aten_fallbacks']} copies reached aten's strided kernel; {each}.",
        ]
    return lines
