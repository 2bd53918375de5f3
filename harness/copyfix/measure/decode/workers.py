"""The decode's processes: the variants' workers, alternating within a budget, the
KunlunXIN and nvidia-on-the-interpreter sections, and the rows combined."""

from __future__ import annotations

import dataclasses
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from copyfix import emulation, records
from copyfix.budget import Budget

from .model import (
    CONFIGS,
    CPU_EXCLUDED,
    CPU_NVIDIA_EXCLUDED,
    NVIDIA_EXCLUDED,
    VARIANTS,
    Gems,
    measure_config,
    whole_model_config,
    with_hit_rate,
)

REPO = Path(__file__).resolve().parents[4]
BASE_ONLY = REPO / "build" / "base-only"


# ------------------------------------------------------------------ in a worker process


def run_info(torch, mode: str) -> dict:
    import transformers
    import triton

    import flag_gems
    from copyfix.compose import overlay_info

    on_device = torch.cuda.is_available()
    machine = (
        torch.cuda.get_device_name() if on_device else platform.processor() or "cpu"
    )
    package = Path(flag_gems.__file__).parent
    info = overlay_info(package)
    return {
        "machine": f"{machine}, {os.cpu_count()} CPU cores",
        "mode": mode,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "transformers": transformers.__version__,
        "flag_gems": getattr(flag_gems, "__version__", "?"),
        "flag_gems_dir": str(package),
        "composed": bool(info),
        "flag_gems_base": emulation.flag_gems_base(package) or "unknown",
        "base_origin": info.get("BASE_ORIGIN", "the base alone (build/base-only)"),
    }


def worker(variant: str, names: list[str], rounds: int, out: Path) -> None:
    """A worker process: every config of ``names`` under ``variant``, into ``out``."""
    mode = emulation.activate(detect=False) or "nvidia"
    import torch

    import flag_gems  # noqa: F401

    info = run_info(torch, mode)
    if info["composed"] == (variant == "base"):
        raise SystemExit(
            f"{variant}: imported {info['flag_gems_dir']}, composed={info['composed']}"
        )
    excluded = NVIDIA_EXCLUDED.get(info["flag_gems_base"], {})
    gems = Gems(CPU_EXCLUDED if mode == "cpu" else excluded)
    rows = [measure_config(torch, variant, name, rounds, gems) for name in names]
    records.write(out, {"info": info, "rows": rows})


def kunlunxin_section(names: list[str]) -> dict:
    """:func:`whole_model_config`, device model on, in this emulated process."""
    mode = emulation.activate()
    import torch

    gems = Gems(CPU_EXCLUDED if mode == "cpu" else None)
    device_type = "cpu" if mode == "cpu" else "cuda"
    configs = [whole_model_config(torch, name, gems, device_type) for name in names]
    return _section(
        torch, mode, configs,
        device_model="xpu_device_model(record=...): aten's strided copy missing for every caller",
        strided_aten_fallbacks=sum(c["strided_aten_fallbacks"] for c in configs),
    )  # fmt: skip


def nvidia_cpu_section(names: list[str], every_op: bool = False) -> dict:
    """:func:`whole_model_config` under the cpu emulation's nvidia variant, the ops of
    :data:`CPU_NVIDIA_EXCLUDED` left out (with ``every_op``, only those that raise)."""
    mode = emulation.activate()
    if mode != "cpu" or emulation.CPU_VENDOR != "nvidia":
        raise SystemExit(
            f"--nvidia-cpu runs under COPYFIX_EMULATION=cpu "
            f"{emulation.ENV_CPU_VENDOR}=nvidia (got {mode!r}, {emulation.CPU_VENDOR!r})"
        )
    import torch

    gems = Gems(None if every_op else CPU_NVIDIA_EXCLUDED)
    configs = [whole_model_config(torch, name, gems) for name in names]
    return _section(torch, mode, configs, every_op=every_op)


def _section(torch, mode: str, configs: list[dict], **more) -> dict:
    info = {**run_info(torch, mode), "gems_vendor": emulation.GEMS_VENDOR}
    return {**info, **more, "configs": configs}


# ------------------------------------------------------------------ fresh processes


def base_only(dest: Path = BASE_ONLY) -> Path:
    """``dest`` holding the base alone: the imported composition, pre-images put back."""
    import shutil

    from copyfix.compose import decompose, overlay_info

    composed = emulation.flag_gems_dir()
    if composed is None or not overlay_info(composed):
        raise SystemExit(f"{composed}: not a composed flag_gems (compose first)")
    shutil.rmtree(dest, ignore_errors=True)
    decompose(composed, dest / "flag_gems")
    return dest


def worker_env(variant: str, mode: str, base: Path = BASE_ONLY) -> dict:
    """A worker's environment: ``nvidia`` (no emulation) or an emulation mode."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in (emulation.ENV_MODE, "GEMS_VENDOR")
    }
    if mode == "nvidia":
        env["GEMS_VENDOR"] = "nvidia"
    else:
        env[emulation.ENV_MODE] = mode
    env["PYTHONPATH"] = os.pathsep.join(
        [*([str(base)] if variant == "base" else []), str(REPO / "harness"),
         *filter(None, [os.environ.get("PYTHONPATH")])]
    )  # fmt: skip
    return env


def nvidia_cpu_env(cache_dir: Path) -> dict:
    """The cpu emulation's nvidia variant, FlagGems' caches in ``cache_dir``."""
    env = worker_env("composed", "cpu")
    env[emulation.ENV_CPU_VENDOR] = "nvidia"
    env["FLAGGEMS_CACHE_DIR"] = str(cache_dir)
    env.pop("FLAGGEMS_DB_URL", None)
    env.pop("TRITON_INTERPRET", None)
    return env


def _in_process(
    args_list: list[str], env: dict, out: Path, timeout: float | None
) -> dict:
    """``python -m copyfix.measure.decode ARGS --out OUT`` in a fresh process: its JSON."""
    cmd = [sys.executable, "-m", "copyfix.measure.decode", *args_list, "--out", out]
    subprocess.run(cmd, env=env, check=True, timeout=timeout)
    return records.load(out)


def nvidia_cpu_process(
    names: list[str], tmp: Path, timeout: float | None = None, every_op: bool = False
) -> dict:
    """:func:`nvidia_cpu_section` in a fresh process (its own caches under ``tmp``)."""
    env = nvidia_cpu_env(tmp / "flaggems")
    args_list = ["--nvidia-cpu", "--configs", ",".join(names)]
    args_list += ["--every-op"] if every_op else []
    return _in_process(args_list, env, tmp / "nvidia_cpu.json", timeout)


def _kunlunxin_process(args, tmp: Path, budget: Budget) -> dict:
    """The kunlunxin_emulated section, from a fresh process (or why it has none)."""
    print(f"=== kunlunxin emulated ({', '.join(args.kunlunxin_configs)}) "
          f"{time.strftime('%H:%M:%S')}", flush=True)  # fmt: skip
    env = worker_env("composed", "cpu" if args.mode == "cpu" else "cuda")
    kx_args = ["--kunlunxin", "--configs", ",".join(args.kunlunxin_configs)]
    try:
        return _in_process(kx_args, env, tmp / "kunlunxin.json", budget.left())
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        return {"error": str(e)}


def schedule(variants: list[str], processes: int) -> list[tuple[int, str]]:
    """(round, variant) in the order the workers run, rotating each round."""
    k = len(variants)
    return [
        (i, v) for i in range(processes) for v in variants[i % k :] + variants[: i % k]
    ]


def measure(args, write) -> dict:
    """The workers, then the KunlunXIN section; ``write(record)`` after each worker
    (a run cut short keeps what it measured); a worker starts only if it fits the budget."""
    if "base" in args.variants:
        base_only()
    budget = Budget(
        args.budget_s, args.kunlunxin_reserve_s if args.kunlunxin_configs else 0
    )
    record = {"processes": args.processes, "rounds": args.rounds, "runs": {},
              "per_process": [], "workers_not_run": [], "workers_failed": []}  # fmt: skip
    rows = record["per_process"]
    with tempfile.TemporaryDirectory(prefix="copyfix-decode-") as tmp:
        for i, variant in schedule(args.variants, args.processes):
            label = f"{variant} process {i + 1} of {args.processes}"
            if not budget.fits_another(variant):
                record["workers_not_run"].append(label)
                continue
            print(
                f"=== {label} ({', '.join(args.configs)}) {time.strftime('%H:%M:%S')}",
                flush=True,
            )
            worker_args = ["--worker", variant, "--configs", ",".join(args.configs),
                           "--rounds", str(args.rounds)]  # fmt: skip
            try:
                env = worker_env(variant, args.mode)
                out = Path(tmp) / f"{variant}{i}.json"
                data = budget.timed(
                    variant, _in_process, worker_args, env, out, budget.spare()
                )
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
                record["workers_failed"].append(f"{label}: {e}")
                continue
            rows += data["rows"]
            record["runs"].setdefault(variant, data["info"])
            record.setdefault("machine", data["info"]["machine"])
            record["configs"] = config_records(rows, args.configs)
            write(record)
        if args.kunlunxin_configs:
            record["kunlunxin_emulated"] = _kunlunxin_process(args, Path(tmp), budget)
    write(record)
    return record


# ------------------------------------------------------------------ the record


def combine(rows: list[dict]) -> dict:
    """One config's rows: per variant the median tok/s and ``x_eager`` (each kept)."""
    out = {}
    eager = []
    for variant in VARIANTS:
        mine = [r for r in rows if r["variant"] == variant]
        if not mine:
            continue
        eager += [r["eager_tok_s"] for r in mine]
        out[f"{variant}_tok_s"] = statistics.median(r["tok_s"] for r in mine)
        out[f"{variant}_x_eager"] = statistics.median(r["x_eager"] for r in mine)
        out[f"{variant}_x_eager_per_process"] = [r["x_eager"] for r in mine]
        out[f"{variant}_vs_eager"] = [r["vs_eager"] for r in mine]
    out["eager_tok_s"] = statistics.median(eager)
    timed = [
        r["cache_timed"]
        for r in rows
        if r["variant"] == "composed" and r["cache_timed"]
    ]
    if timed:
        cache = {k: sum(c[k] for c in timed) for k in ("hits", "misses", "recordings")}
        out["cache"] = {**with_hit_rate(cache), "processes": len(timed)}
    composed = [r for r in rows if r["variant"] != "base"]
    if composed:
        out["tokens_equal_cache_off"] = (
            all(r["tokens_equal_other_cache_setting"] for r in composed)
            and len({r["tokens_sha"] for r in composed}) == 1
        )
    out["ops_excluded"] = sorted({op for r in rows for op in r["ops_excluded"]})
    return out


def config_records(rows: list[dict], names: list[str]) -> dict:
    return {
        name: {**dataclasses.asdict(CONFIGS[name]), **combine(mine)}
        for name in names
        if (mine := [r for r in rows if r["config"] == name])
    }
