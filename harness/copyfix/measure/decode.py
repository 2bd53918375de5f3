"""End to end: a Hugging Face Llama decode under FlagGems (issue 51).

    python -m copyfix.measure.decode [--configs small,large,single] [--processes 3]
        [--rounds 3] [--kunlunxin-configs small] [--out results/decode_h200.json]

transformers' own ``LlamaForCausalLM.generate`` (random init, no download), bf16, greedy,
a fixed prompt (left-padded where batched), exactly ``new_tokens`` tokens per sequence.
Configs (:data:`CONFIGS`): ``small`` hidden 256, 4 layers, batch 2, 48 new tokens;
``large`` hidden 1024, 8 layers, batch 4, 32 new tokens; ``single`` the large model at
batch 1 (single-stream decode); ``tiny`` the cpu emulation's (2 layers, hidden 32, fp32).

Variants (:data:`VARIANTS`), each in its own fresh worker process, the processes
alternating (``--processes`` rounds of one process per variant), every FlagGems op under
``flag_gems.use_gems()`` on FlagGems' own NVIDIA backend (``GEMS_VENDOR=nvidia``, no
emulation), eager torch timed in the same process, in alternating rounds:

``base``                the pinned base alone (flag-gems 5.0.2 without this overlay):
                        the composition with every pre-image put back
                        (``compose.decompose``) into ``build/base-only``, first on the
                        worker's ``PYTHONPATH``
``composed``            this composition, launch cache on
``composed_cache_off``  this composition, ``launch_cache.set_enabled(False)``

Per config and variant: tok/s (the median over processes), and ``x_eager``: the
variant's time per token over eager's in the same process (eager tok/s over the
variant's: 1.0 as fast as eager, 2.0 twice eager's time), the median over processes,
each process's own kept.  Cache-on processes
record the cache's hits, misses and recordings over their timed generates; the
composed processes each also generate once with the other cache setting, and the
tokens with the cache on must equal those with it off (in each process and across
them).  Tokens and logits against eager: information only (bf16 kernels differ).

``kunlunxin_emulated``: the same decode with ``GEMS_VENDOR=kunlunxin`` in the cuda
emulation (``COPYFIX_EMULATION=cuda``), every FlagGems op, the KunlunXIN device model
on in its recording form (``emulation.xpu_device_model(record=...)``: every copy aten
would have run with its missing strided kernel is listed, with the FlagGems op and the
call site, and then runs): ``strided_aten_fallbacks`` (0 ideally), the list, and
whether the tokens equal the same run with the device model off and with the cache off.
An op that raises is left out of ``use_gems`` and named with its error
(``ops_excluded``); in the cpu emulation (Triton's interpreter) the ops of
:data:`CPU_EXCLUDED` are left out from the start, each with the reason.

``--nvidia-cpu`` (:func:`nvidia_cpu_section`, ``make test``'s check of the generic
codegen): the same decode on FlagGems' default (NVIDIA) backend in the cpu emulation
(``COPYFIX_CPU_VENDOR=nvidia``), the ops of :data:`CPU_NVIDIA_EXCLUDED` left out, against
eager and with the cache off.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as _dt
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from copyfix import provenance

REPO = Path(__file__).resolve().parents[3]
RESULT = REPO / "results" / "decode_h200.json"
BASE_ONLY = REPO / "build" / "base-only"
# every PR file: the whole model runs through all of them
OP_FILES = ("src/flag_gems",)


@dataclasses.dataclass(frozen=True)
class Config:
    hidden: int
    layers: int
    batch: int
    new_tokens: int
    heads: int
    kv_heads: int
    vocab: int = 32000
    prompt: int = 16
    dtype: str = "bfloat16"

    def llama(self):
        from transformers import LlamaConfig

        return LlamaConfig(
            vocab_size=self.vocab,
            hidden_size=self.hidden,
            intermediate_size=self.hidden * 11 // 4,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads,
            max_position_embeddings=self.prompt + self.new_tokens + 8,
        )


# fmt: off
CONFIGS = {
    "small": Config(hidden=256, layers=4, batch=2, new_tokens=48, heads=4, kv_heads=2),
    "large": Config(hidden=1024, layers=8, batch=4, new_tokens=32, heads=16, kv_heads=4),
    "single": Config(hidden=1024, layers=8, batch=1, new_tokens=32, heads=16, kv_heads=4),
    "tiny": Config(hidden=32, layers=2, batch=1, new_tokens=2, heads=4, kv_heads=2,
                   vocab=128, prompt=3, dtype="float32"),
}
# fmt: on
VARIANTS = ("base", "composed", "composed_cache_off")

# The kunlunxin ops the cpu emulation cannot run: none.  Every op the tiny decode
# reaches runs on Triton's interpreter (flag-gems 5.0.2 and main 2026-08-21), through
# the emulation's shims (copyfix.emulation: the CPU device object, the kunlunxin
# libdevice stand-ins, the generate_configs stand-in, the XPU launch options, where's
# device pick, Triton's library functions, dtype and bool arguments).  Kept as the
# use_gems(exclude=...) names with why, should an op ever have to be left out again;
# tests/harness/test_decode.py checks both ways that exactly these are left out.
CPU_EXCLUDED: dict[str, str] = {}

# FlagGems' own NVIDIA backend (flag-gems 5.0.2 and this composition alike; H200, torch
# 2.11.0+cu130, Triton 3.6.0): the generic `mul` of an RMSNorm's (B, 1, H) fp32 by its
# (B, 1, 1) rsqrt leaves the CUDA context faulted (illegal memory access) at a varying
# decode step (10 to 40 of 48, small config), found by a host->device copy after every op;
# with `mul` left out the decode runs to the end. A bug of the base's NVIDIA pointwise
# kernel, not of PR 1-5 (base-only fails alike); left out of every NVIDIA variant, named.
NVIDIA_EXCLUDED = {
    "mul": "stock NVIDIA pointwise mul (B,1,H) x (B,1,1) fp32 faults the CUDA context "
    "(illegal memory access) at a varying decode step, flag-gems 5.0.2 and composed alike",
}


# ------------------------------------------------------------------ the model


def build(torch, config: Config, device: str):
    """(model, input ids, attention mask) on ``device``: seeded, so every process
    builds the same weights and prompt; the first sequence left-padded where batched."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(config.llama()).to(getattr(torch, config.dtype)).eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, config.vocab, (config.batch, config.prompt), generator=g)
    mask = torch.ones_like(ids)
    if config.batch > 1:
        mask[0, : config.prompt // 4] = 0
        ids[0, : config.prompt // 4] = 0
    return model.to(device), ids.to(device), mask.to(device)


def generate(torch, model, ids, mask, new_tokens: int, logits: bool = False):
    """Greedy ``model.generate``: exactly ``new_tokens`` new tokens per sequence, as
    a (batch, new_tokens) CPU tensor; with ``logits``, also each step's raw logits."""
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=0,
            output_logits=logits,
            return_dict_in_generate=logits,
        )
    tokens = (out.sequences if logits else out)[:, ids.shape[1] :].cpu()
    if not logits:
        return tokens
    return tokens, [step.float().cpu() for step in out.logits]


def tokens_sha(tokens) -> str:
    return hashlib.sha256(tokens.numpy().tobytes()).hexdigest()[:16]


def against(tokens, logits, ref_tokens, ref_logits) -> dict:
    """Tokens and logits against a reference run (eager): whether the tokens are
    equal, the first step where they part, and the largest logit difference over the
    steps up to and including that one (the steps that saw the same context)."""
    parted = [
        s
        for s in range(tokens.shape[1])
        if not bool((tokens[:, s] == ref_tokens[:, s]).all())
    ]
    first = parted[0] if parted else None
    steps = range(tokens.shape[1] if first is None else first + 1)
    diff = max(float((logits[s] - ref_logits[s]).abs().max()) for s in steps)
    return {
        "tokens_equal": first is None,
        "first_divergence": first,
        "max_logit_diff": diff,
    }


# ------------------------------------------------------------------ FlagGems on


@contextlib.contextmanager
def cache_setting(on: bool):
    """The launch cache on or off for a block (a base without the cache: no-op)."""
    try:
        from flag_gems.utils import launch_cache
    except ImportError:
        yield
        return
    was = launch_cache.is_enabled()
    launch_cache.set_enabled(on)
    try:
        yield
    finally:
        launch_cache.set_enabled(was)


def _failing_op(error: BaseException) -> str | None:
    """The FlagGems function torch dispatched to where ``error`` was raised: the
    outermost FlagGems frame of its traceback (use_gems' exclude takes its name)."""
    frames = [
        f
        for f in traceback.extract_tb(error.__traceback__)
        if "/flag_gems/" in f.filename
    ]
    return frames[0].name if frames else None


class Gems:
    """``flag_gems.use_gems()`` with the ops that raised left out: :meth:`run` calls
    a function under it, and where an op raises, excludes that op, records why in
    :attr:`excluded` and calls again (an error outside FlagGems, or a second from one
    op, propagates)."""

    def __init__(self, excluded: dict | None = None):
        self.excluded = dict(excluded or {})
        self.copy_record: list | None = None  # see copy_calls_recorded

    @contextlib.contextmanager
    def context(self):
        import flag_gems

        with flag_gems.use_gems(exclude=sorted(self.excluded)):
            if self.copy_record is None or "copy_" in self.excluded:
                yield
            else:
                with copy_calls_recorded(self.copy_record):
                    yield

    def run(self, fn, *args, **kwargs):
        while True:
            if self.copy_record is not None:  # (the last attempt's calls only)
                self.copy_record.clear()
            try:
                with self.context():
                    return fn(*args, **kwargs)
            except Exception as error:  # an op's failure: exclude it, call again
                op = _failing_op(error)
                if op is None or op in self.excluded:
                    raise
                self.excluded[op] = f"{type(error).__name__}: {str(error)[:300]}"
                print(f"    {op} raised, excluded: {self.excluded[op]}", flush=True)


def _copy_call_entry(dst, src) -> dict:
    """One copy_ call for :func:`copy_calls_recorded`: the FlagGems op it came from
    (the outermost FlagGems frame, None if none), the call site (the innermost frame
    outside torch, FlagGems, the emulation and this recorder) and both layouts."""
    from copyfix.emulation import faults

    op = call_site = None
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename
        if "/flag_gems/" in path:
            op = faults._frame_label(frame)
        elif call_site is None and not any(m in path for m in faults._MACHINERY):
            call_site = faults._frame_label(frame)
        frame = frame.f_back
    layout = lambda t: (  # noqa: E731
        faults._layout(t) if hasattr(t, "stride") else {"scalar": type(t).__name__}
    )
    return {"op": op, "call_site": call_site, "dst": layout(dst), "src": layout(src)}


@contextlib.contextmanager
def copy_calls_recorded(record: list):
    """Inside ``flag_gems.use_gems()``: every ``aten::copy_`` that reaches FlagGems'
    kunlunxin ``copy_`` on the device's dispatch key is listed in ``record``
    (:func:`_copy_call_entry`) and then runs that ``copy_`` as use_gems would.
    A Python kernel registered after use_gems' own (the dispatcher takes the most
    recent), for the block only."""
    import warnings

    import torch

    from copyfix import emulation

    target = emulation.copy_module()
    key = "CPU" if emulation.require() == "cpu" else "CUDA"

    def copy_(dst, src, non_blocking=False):
        record.append(_copy_call_entry(dst, src))
        return target.copy_(dst, src, non_blocking)

    lib = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*[Oo]verrid.*")
            lib.impl("copy_", copy_, key)
        yield
    finally:
        lib._destroy()


def with_hit_rate(counts: dict) -> dict:
    """``counts`` (hits, misses, ...) with ``hit_rate``: hits over the calls."""
    calls = counts["hits"] + counts["misses"]
    return {**counts, "hit_rate": counts["hits"] / calls if calls else None}


def cache_stats() -> dict | None:
    """The launch cache's counts (None for a base without it), with the hit rate."""
    try:
        from flag_gems.utils import launch_cache
    except ImportError:
        return None
    return with_hit_rate(launch_cache.stats())


def pointwise_calls() -> dict:
    """Calls of the pointwise functions (``PointwiseDynamicFunction``s that imported
    modules hold) per codegen, ``generic`` (FlagGems' default, NVIDIA's) and
    ``kunlunxin``, as their launch caches counted them (hits + misses; {} for a base
    without the cache)."""
    from copyfix.measure.base_twins import GENERIC, KUNLUNXIN

    out = {}
    for label, module_name in (("generic", GENERIC), ("kunlunxin", KUNLUNXIN)):
        cls = getattr(sys.modules.get(module_name), "PointwiseDynamicFunction", None)
        found = {
            id(v): v
            for mod in list(sys.modules.values())
            for v in list(getattr(mod, "__dict__", {}).values())
            if cls is not None and type(v) is cls and hasattr(v, "_launch_cache")
        }
        if found:
            out[label] = sum(
                f._launch_cache.hits + f._launch_cache.misses for f in found.values()
            )
    return out


def calls_delta(before: dict, after: dict) -> dict:
    """:func:`pointwise_calls` from ``before`` to ``after``."""
    return {k: v - before.get(k, 0) for k, v in after.items()}


def stats_delta(before: dict | None, after: dict | None) -> dict | None:
    """The cache's counts from ``before`` to ``after`` (:func:`cache_stats`)."""
    if before is None or after is None:
        return None
    d = {k: after[k] - before[k] for k in ("hits", "misses", "recordings")}
    return with_hit_rate({**d, "plans": after["plans"]})


# ------------------------------------------------------------------ timing


def _sync(torch):
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def alternating_seconds(torch, columns: dict, rounds: int) -> dict:
    """Wall seconds of each column's call ({name: (context, fn)}: ``fn`` timed inside
    ``context()``, entered untimed), in ``rounds`` alternating rounds (each round every
    column once, in a rotating order): {name: [seconds, ...]}."""
    names = list(columns)
    times = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            context, fn = columns[name]
            with context():
                _sync(torch)
                t0 = time.perf_counter()
                fn()
                _sync(torch)
                times[name].append(time.perf_counter() - t0)
    return times


# ------------------------------------------------------------------ one worker process


def _device(torch) -> str:
    from copyfix import emulation

    if emulation.MODE is not None:
        return emulation.device()
    return "cuda" if torch.cuda.is_available() else "cpu"


def measure_config(torch, variant: str, name: str, rounds: int, gems: Gems) -> dict:
    """One config in this (fresh) process: eager and ``variant`` timed in alternating
    rounds after a warm-up each; tokens and logits against eager; the cache's counts
    over the timed generates; in a composed process, the tokens with the other cache
    setting."""
    config = CONFIGS[name]
    model, ids, mask = build(torch, config, _device(torch))
    n = config.new_tokens
    cache_on = variant != "composed_cache_off"
    print(f"  [{variant}] {name}: warm-up (eager, then FlagGems)", flush=True)
    ref_tokens, ref_logits = generate(torch, model, ids, mask, n, logits=True)
    with cache_setting(cache_on):
        tokens, logits = gems.run(generate, torch, model, ids, mask, n, logits=True)
    before, calls_before = cache_stats(), pointwise_calls()
    with cache_setting(cache_on):
        run = lambda: generate(torch, model, ids, mask, n)  # noqa: E731
        times = alternating_seconds(
            torch,
            {"eager": (contextlib.nullcontext, run), "gems": (gems.context, run)},
            rounds,
        )
    after, calls_after = cache_stats(), pointwise_calls()
    row = {
        "variant": variant,
        "config": name,
        "eager_s": times["eager"],
        "variant_s": times["gems"],
        "eager_tok_s": config.batch * n / statistics.median(times["eager"]),
        "tok_s": config.batch * n / statistics.median(times["gems"]),
        "tokens_sha": tokens_sha(tokens),
        "vs_eager": against(tokens, logits, ref_tokens, ref_logits),
        # the cache's counts and the pointwise calls it saw (one switched off sees none)
        "cache_timed": stats_delta(before, after) if cache_on else None,
        "pointwise_calls_by_codegen": calls_delta(calls_before, calls_after)
        if cache_on
        else None,
        "ops_excluded": dict(gems.excluded),
    }
    row["x_eager"] = row["eager_tok_s"] / row["tok_s"]
    if variant != "base":
        with cache_setting(not cache_on):
            other = gems.run(generate, torch, model, ids, mask, n)
        row["tokens_equal_other_cache_setting"] = bool(torch.equal(other, tokens))
    print(f"  [{variant}] {name}: eager {row['eager_tok_s']:.1f} tok/s, {variant} "
          f"{row['tok_s']:.1f} tok/s ({row['x_eager']:.2f} x eager time), "
          f"cache {row['cache_timed']}", flush=True)  # fmt: skip
    return row


def run_info(torch, mode: str) -> dict:
    """Machine, versions and mode of this process."""
    import transformers
    import triton

    import flag_gems
    from copyfix.compose import overlay_info
    from copyfix.emulation import flag_gems_base

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
        "flag_gems_base": flag_gems_base(package) or "unknown",
        "base_origin": info.get("BASE_ORIGIN", "the base alone (build/base-only)"),
    }


def _activate() -> str:
    """The emulation where ``$COPYFIX_EMULATION`` asks for one, else FlagGems' own
    backend as its vendor pick makes it (``GEMS_VENDOR`` as set): the mode's name."""
    if os.environ.get("COPYFIX_EMULATION"):
        from copyfix import emulation

        return emulation.activate()
    return f"native {os.environ.get('GEMS_VENDOR', 'auto')}"


def worker(variant: str, names: list[str], rounds: int, out: Path) -> None:
    """A worker process: every config of ``names`` under ``variant``, into ``out``."""
    mode = _activate()
    import torch

    import flag_gems  # noqa: F401

    info = run_info(torch, mode)
    if info["composed"] == (variant == "base"):
        raise SystemExit(
            f"{variant}: imported {info['flag_gems_dir']}, composed={info['composed']}"
        )
    gems = Gems(CPU_EXCLUDED if mode == "cpu" else NVIDIA_EXCLUDED)
    rows = [measure_config(torch, variant, name, rounds, gems) for name in names]
    out.write_text(json.dumps({"info": info, "rows": rows}, indent=1) + "\n")


# ------------------------------------------------------------------ KunlunXIN, the whole model


def _dedupe(entries: list[dict]) -> list[dict]:
    """One entry per (via, op, call site, layouts), with how many times it came."""
    counted = {}
    for e in entries:
        key = json.dumps(e, sort_keys=True)
        counted.setdefault(key, {**e, "count": 0})["count"] += 1
    return list(counted.values())


def whole_model_config(torch, name: str, gems: Gems, device_type=None) -> dict:
    """The decode with every FlagGems op (those raising left out), against eager and
    with the cache off; with ``device_type``, under the KunlunXIN device model recording
    on that key (the whole model on the emulated device), and against the model off."""
    from copyfix import emulation

    config = CONFIGS[name]
    model, ids, mask = build(torch, config, _device(torch))
    n = config.new_tokens
    ref_tokens, ref_logits = generate(torch, model, ids, mask, n, logits=True)
    record: list[dict] = []
    model_on = (
        contextlib.nullcontext()
        if device_type is None
        else emulation.xpu_device_model(device_type, record=record)
    )
    copies: list[dict] = []
    with model_on:
        before, calls_before = cache_stats(), pointwise_calls()
        gems.copy_record = copies if device_type is not None else None
        try:
            with cache_setting(True):  # (opt-in: off unless turned on)
                tokens, logits = gems.run(
                    generate, torch, model, ids, mask, n, logits=True
                )
        finally:
            gems.copy_record = None
        after, calls_after = cache_stats(), pointwise_calls()
        with cache_setting(False):
            cache_off = gems.run(generate, torch, model, ids, mask, n)
    row = {"config": name}
    if device_type is not None:
        print(f"  [kunlunxin] {name}: {len(record)} strided aten copies", flush=True)
        model_off = gems.run(generate, torch, model, ids, mask, n)
        row["strided_aten_fallbacks"] = len(record)
        row["fallbacks"] = _dedupe(record)
        row["tokens_equal_device_model_off"] = bool(torch.equal(tokens, model_off))
        # every copy_ FlagGems' kunlunxin copy_ took in that run (of its last
        # attempt, where an op raised and the run restarted), by call site
        row["copy_calls"] = len(copies)
        row["copy_call_sites"] = _dedupe(copies)
    return {
        **row,
        "tokens_equal_cache_off": bool(torch.equal(tokens, cache_off)),
        "cache": stats_delta(before, after),
        "pointwise_calls_by_codegen": calls_delta(calls_before, calls_after),
        "vs_eager": against(tokens, logits, ref_tokens, ref_logits),
        "ops_excluded": dict(gems.excluded),
    }


def kunlunxin_section(names: list[str]) -> dict:
    """:func:`whole_model_config` (device model on) for each of ``names``, in this process (an emulation
    mode active: cuda on the GPU box, cpu here)."""
    from copyfix import emulation

    mode = emulation.activate()
    import torch

    gems = Gems(CPU_EXCLUDED if mode == "cpu" else None)
    device_type = "cpu" if mode == "cpu" else "cuda"
    configs = [whole_model_config(torch, name, gems, device_type) for name in names]
    return {
        **run_info(torch, mode),
        "gems_vendor": os.environ.get("GEMS_VENDOR"),
        "device_model": "xpu_device_model(record=...): aten's strided copy missing for every caller",
        "strided_aten_fallbacks": sum(c["strided_aten_fallbacks"] for c in configs),
        "configs": configs,
    }


# ------------------------------------------------------------------ NVIDIA on the interpreter

# The ops FlagGems' default (NVIDIA) backend cannot run in the cpu emulation's nvidia
# variant (COPYFIX_CPU_VENDOR=nvidia: GEMS_VENDOR=nvidia on Triton 3.6's interpreter,
# composed flag-gems 5.0.2), found by running the tiny decode with every op
# (`python -m copyfix.measure.decode --nvidia-cpu --every-op --configs tiny`, in that
# environment: nvidia_cpu_env); tests/harness/test_decode.py runs it that way and checks
# that exactly these ops were left out.
# fmt: off
CPU_NVIDIA_EXCLUDED = {
    "pow_tensor_scalar": "calls libdevice pow (tl_extra_shim.pow, an extern function), "
                         "which the interpreter rejects (\"Did you forget to add @triton.jit ?\"; "
                         "3.6's InterpreterBuilder.create_extern_elementwise raises "
                         "NotImplementedError)",
}
# fmt: on


def nvidia_cpu_section(names: list[str], every_op: bool = False) -> dict:
    """:func:`whole_model_config` (no device model: NVIDIA has aten's strided copy)
    for each of ``names``, in this process (the cpu emulation's nvidia variant
    active), the ops of :data:`CPU_NVIDIA_EXCLUDED` left out from the start; with
    ``every_op``, none (``ops_excluded`` is then exactly the ops that raised, with
    their errors; slower: the decode restarts at each)."""
    from copyfix import emulation

    mode = emulation.activate()
    if mode != "cpu" or emulation.CPU_VENDOR != "nvidia":
        raise SystemExit(
            f"--nvidia-cpu runs under COPYFIX_EMULATION=cpu "
            f"{emulation.ENV_CPU_VENDOR}=nvidia (got {mode!r}, {emulation.CPU_VENDOR!r})"
        )
    import torch

    gems = Gems(None if every_op else CPU_NVIDIA_EXCLUDED)
    configs = [whole_model_config(torch, name, gems) for name in names]
    return {
        **run_info(torch, mode),
        "gems_vendor": os.environ.get("GEMS_VENDOR"),
        "every_op": every_op,
        "configs": configs,
    }


def nvidia_cpu_env(cache_dir: Path) -> dict:
    """The environment of a process running the cpu emulation's nvidia variant on
    the composition: FlagGems' caches in ``cache_dir`` (not the caller's)."""
    from copyfix import emulation

    env = worker_env("composed", "cpu")
    env[emulation.ENV_CPU_VENDOR] = "nvidia"
    env["FLAGGEMS_CACHE_DIR"] = str(cache_dir)
    env.pop("FLAGGEMS_DB_URL", None)
    env.pop("TRITON_INTERPRET", None)
    return env


def nvidia_cpu_process(
    names: list[str], tmp: Path, timeout: float | None = None, every_op: bool = False
) -> dict:
    """:func:`nvidia_cpu_section` in a fresh process (its own caches under ``tmp``)."""
    env = nvidia_cpu_env(tmp / "flaggems")
    args_list = ["--nvidia-cpu", "--configs", ",".join(names)]
    args_list += ["--every-op"] if every_op else []
    return _in_process(args_list, env, tmp / "nvidia_cpu.json", timeout)


# ------------------------------------------------------------------ the parent


def base_only(dest: Path = BASE_ONLY) -> Path:
    """``dest`` (``build/base-only``) holding ``flag_gems``: the pinned base alone (the
    composition's package with every pre-image put back), rebuilt from the composition
    ``import flag_gems`` finds."""
    import shutil

    from copyfix.compose import decompose, overlay_info
    from copyfix.emulation import flag_gems_dir

    composed = flag_gems_dir()
    if composed is None or not overlay_info(composed):
        raise SystemExit(f"{composed}: not a composed flag_gems (compose first)")
    shutil.rmtree(dest, ignore_errors=True)
    decompose(composed, dest / "flag_gems")
    return dest


def worker_env(variant: str, mode: str, base: Path = BASE_ONLY) -> dict:
    """A worker's environment: FlagGems' NVIDIA backend without emulation (``native``)
    or the given emulation; the base alone first on the path for ``base``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("COPYFIX_EMULATION", "GEMS_VENDOR")
    }
    if mode == "native":
        env["GEMS_VENDOR"] = "nvidia"
    else:
        env["COPYFIX_EMULATION"] = mode
    env["PYTHONPATH"] = os.pathsep.join(
        [*([str(base)] if variant == "base" else []), str(REPO / "harness"),
         *filter(None, [os.environ.get("PYTHONPATH")])]
    )  # fmt: skip
    return env


def _in_process(
    args_list: list[str], env: dict, out: Path, timeout: float | None
) -> dict:
    """``python -m copyfix.measure.decode ARGS --out OUT`` in a fresh process: its JSON."""
    cmd = [
        sys.executable,
        "-m",
        "copyfix.measure.decode",
        *args_list,
        "--out",
        str(out),
    ]
    subprocess.run(cmd, env=env, check=True, timeout=timeout)
    return json.loads(out.read_text())


def combine(rows: list[dict]) -> dict:
    """One config's per-process rows (every variant) into its record: per variant the
    median tok/s and the median of the processes' own ``x_eager``, each kept."""
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


def schedule(variants: list[str], processes: int) -> list[tuple[int, str]]:
    """(process round, variant) in the order the workers run: one process per variant
    per round, the order rotating from round to round."""
    k = len(variants)
    return [
        (i, v) for i in range(processes) for v in variants[i % k :] + variants[: i % k]
    ]


class Budget:
    """Seconds left of ``total`` (None: no limit), and whether another worker of a
    kind still fits before ``reserve`` (kept for the KunlunXIN section): as long as
    the last of its kind took (the first of a kind compiles its kernels), or as the
    last worker of any kind."""

    def __init__(self, total: float | None, reserve: float):
        self.end = time.monotonic() + total if total else None
        self.reserve, self.last = reserve, {}

    def left(self) -> float | None:
        return None if self.end is None else max(1.0, self.end - time.monotonic())

    def fits_another(self, kind: str) -> bool:
        left = self.left()
        expected = self.last.get(kind, self.last.get(None, 0.0))
        return left is None or left - self.reserve > expected

    def timed(self, kind: str, fn, *args):
        t0 = time.monotonic()
        try:
            return fn(*args)
        finally:
            self.last[kind] = self.last[None] = time.monotonic() - t0


def measure(args, write) -> dict:
    """The variants in alternating fresh processes, then the KunlunXIN section;
    ``write(record)`` after each worker, so a run cut short leaves what it measured."""
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
                    variant, _in_process, worker_args, env, out, budget.left()
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


def config_records(rows: list[dict], names: list[str]) -> dict:
    """Each config of ``names`` that has rows: its shape and :func:`combine` of them."""
    return {
        name: {**dataclasses.asdict(CONFIGS[name]), **combine(mine)}
        for name in names
        if (mine := [r for r in rows if r["config"] == name])
    }


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


def _names(text: str) -> list[str]:
    names = [n for n in text.split(",") if n]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown config {unknown}; known: {sorted(CONFIGS)}"
        )
    return names


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="copyfix.measure.decode", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--configs", type=_names, default=["small", "large", "single"])
    parser.add_argument("--kunlunxin-configs", type=_names, default=["small"],
                        help="configs of the kunlunxin_emulated section (empty: none)")  # fmt: skip
    parser.add_argument(
        "--processes", type=int, default=3, help="worker processes per variant"
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="timed generates per column"
    )
    parser.add_argument(
        "--variants",
        type=lambda t: [v for v in t.split(",") if v],
        default=list(VARIANTS),
    )
    parser.add_argument("--mode", choices=("native", "cpu"), default="native",
                        help="native: FlagGems' NVIDIA backend (the GPU box); cpu: the cpu "
                        "emulation (plumbing only, kunlunxin codegen)")  # fmt: skip
    parser.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="seconds for the whole run: no worker starts that would not fit",
    )
    parser.add_argument(
        "--kunlunxin-reserve-s",
        type=float,
        default=150,
        help="seconds of --budget-s kept for the kunlunxin_emulated section",
    )
    parser.add_argument("--out", type=Path, default=RESULT)
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--kunlunxin", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--nvidia-cpu", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--every-op", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.configs, args.rounds, args.out)
        return 0
    if args.kunlunxin:
        section = kunlunxin_section(args.configs)
        args.out.write_text(json.dumps(section, indent=1) + "\n")
        return 0
    if args.nvidia_cpu:
        section = nvidia_cpu_section(args.configs, args.every_op)
        args.out.write_text(json.dumps(section, indent=1) + "\n")
        return 0
    stamp = {
        "op_commit": provenance.op_commit(*OP_FILES),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def write(record):
        args.out.write_text(json.dumps({**record, **stamp}, indent=1) + "\n")

    measure(args, write)
    print("\n".join(report_lines(args.out)))
    return 0


# ------------------------------------------------------------------ the report


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
    if not path.is_file():
        return []
    data = json.loads(path.read_text())
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


if __name__ == "__main__":
    sys.exit(main())
