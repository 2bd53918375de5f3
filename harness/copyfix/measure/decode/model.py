"""The decode in the process that runs it: configs, model, FlagGems on, one config's
measurement (:func:`measure_config`, timed) or check (:func:`whole_model_config`)."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import statistics
import sys
import time
import traceback

from copyfix import emulation


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
    "small_single": Config(hidden=256, layers=4, batch=1, new_tokens=32, heads=4, kv_heads=2),
    "tiny": Config(hidden=32, layers=2, batch=1, new_tokens=2, heads=4, kv_heads=2,
                   vocab=128, prompt=3, dtype="float32"),
}
# fmt: on
VARIANTS = ("base", "composed", "composed_cache_off")

# The kunlunxin ops the cpu emulation cannot run (use_gems exclude names, with why):
# none, through copyfix.emulation's shims (flag-gems 5.0.2 and main 2026-08-21).
CPU_EXCLUDED: dict[str, str] = {}

# FlagGems' own NVIDIA backend, per base (copyfix.emulation.FLAGGEMS_BASES), the ops
# left out of use_gems with why.  flag-gems 5.0.2 (not a PR file): its Hopper mul faults
# the decode (memcheck: mul_kernel, mul.py:42); with `mul` left to aten it runs to the end
# (H200, 2026-12-05).  Main 2026-08-21 carries #4666's mul: nothing is left out there.
NVIDIA_EXCLUDED = {
    "5.0.2": {
        "mul": "flag-gems 5.0.2's Hopper mul (_nvidia/hopper/ops/mul.py) ignores "
        "broadcasting for same-rank operands: an RMSNorm's (B,1,H) x (B,1,1) reads out "
        "of bounds (fixed upstream by #4666, in main 2026-08-21)",
    },
}


# ------------------------------------------------------------------ the model


def build(torch, config: Config, device: str):
    """(model, input ids, attention mask), seeded; the first sequence left-padded."""
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
    """Greedy: the (batch, new_tokens) new tokens on the CPU (and each step's logits)."""
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
    """Tokens against a reference run's: equal, the first step they part, and the
    largest logit difference up to that step (the steps that saw the same context)."""
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


def _launch_cache():
    """flag_gems.utils.launch_cache, None for a base without it."""
    try:
        from flag_gems.utils import launch_cache
    except ImportError:
        return None
    return launch_cache


def cache_setting(on: bool):
    """The launch cache on or off for a block (a base without the cache: no-op)."""
    lc = _launch_cache()
    return contextlib.nullcontext() if lc is None else lc.enabled(on)


def _failing_op(error: BaseException) -> str | None:
    """The outermost FlagGems frame of ``error``'s traceback: the op that raised."""
    frames = [
        f
        for f in traceback.extract_tb(error.__traceback__)
        if "/flag_gems/" in f.filename
    ]
    return frames[0].name if frames else None


class Gems:
    """``use_gems()`` where :meth:`run` excludes an op that raised (why, in
    :attr:`excluded`) and calls again; other errors propagate."""

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


@contextlib.contextmanager
def copy_calls_recorded(record: list):
    """Inside ``use_gems()``: each ``aten::copy_`` reaching the kunlunxin ``copy_`` is
    listed in ``record`` (``faults.call_entry``), then runs it (a kernel registered over
    use_gems' own, for the block only)."""
    target = emulation.copy_module()

    def copy_(dst, src, non_blocking=False):
        record.append(emulation.faults.call_entry(dst, src, sys._getframe(1)))
        return target.copy_(dst, src, non_blocking)

    with emulation.aten_copy_kernel(
        copy_, "CPU" if emulation.require() == "cpu" else "CUDA"
    ):
        yield


def with_hit_rate(counts: dict) -> dict:
    calls = counts["hits"] + counts["misses"]
    return {**counts, "hit_rate": counts["hits"] / calls if calls else None}


def cache_stats() -> dict | None:
    lc = _launch_cache()
    return None if lc is None else with_hit_rate(lc.stats())


def pointwise_calls() -> dict:
    """Calls (hits + misses) of the loaded pointwise functions, per codegen."""
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
    return {k: v - before.get(k, 0) for k, v in after.items()}


def stats_delta(before: dict | None, after: dict | None) -> dict | None:
    if before is None or after is None:
        return None
    d = {k: after[k] - before[k] for k in ("hits", "misses", "recordings")}
    return with_hit_rate({**d, "plans": after["plans"]})


# ------------------------------------------------------------------ timing


def _sync(torch):
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def alternating_seconds(torch, columns: dict, rounds: int) -> dict:
    """{name: [seconds, ...]} of each column's ``fn`` ({name: (context, fn)}, timed
    inside ``context()``), in ``rounds`` rounds of a rotating order."""
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


def _device(torch) -> str:
    if emulation.MODE is not None:
        return emulation.device()
    return "cuda" if torch.cuda.is_available() else "cpu"


def measure_config(torch, variant: str, name: str, rounds: int, gems: Gems) -> dict:
    """One config: eager and ``variant`` timed alternately after a warm-up, against
    eager, the cache's counts, and (composed) tokens with the other cache setting."""
    config = CONFIGS[name]
    model, ids, mask = build(torch, config, _device(torch))
    n = config.new_tokens
    cache_on = variant != "composed_cache_off"
    print(f"  [{variant}] {name}: warm-up (eager, then FlagGems) "
          f"{time.strftime('%H:%M:%S')}", flush=True)  # fmt: skip
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
    print(f"  [{variant}] {name} {time.strftime('%H:%M:%S')}: eager {row['eager_tok_s']:.1f} tok/s, {variant} "
          f"{row['tok_s']:.1f} tok/s ({row['x_eager']:.2f} x eager time), "
          f"cache {row['cache_timed']}", flush=True)  # fmt: skip
    return row


def _dedupe(entries: list[dict]) -> list[dict]:
    counted = {}
    for e in entries:
        key = json.dumps(e, sort_keys=True)
        counted.setdefault(key, {**e, "count": 0})["count"] += 1
    return list(counted.values())


def whole_model_config(torch, name: str, gems: Gems, device_type=None) -> dict:
    """Every op, against eager and the cache off; with ``device_type``, under the
    recording KunlunXIN device model, and against the model off."""
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


# ------------------------------------------------------------------ NVIDIA on the interpreter

# The ops the NVIDIA backend cannot run on Triton 3.6's interpreter (found with
# `--nvidia-cpu --every-op --configs tiny`; tests/tooling/test_decode.py checks them).
# fmt: off
CPU_NVIDIA_EXCLUDED = {
    "pow_tensor_scalar": "calls libdevice pow (tl_extra_shim.pow, an extern function), "
                         "which the interpreter rejects (\"Did you forget to add @triton.jit ?\"; "
                         "3.6's InterpreterBuilder.create_extern_elementwise raises "
                         "NotImplementedError)",
}
# fmt: on
