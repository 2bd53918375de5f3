"""copyfix.measure.decode in the cpu emulation: the tiny decode on the kunlunxin
emulation (every op, device model recording, copy_ call sites, cache on and off) and on
the NVIDIA backend's generic codegen (a fresh process); the device model, the stock
variant's import path, the workers, budget, combination and report."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from copyfix import emulation
from copyfix.budget import Budget
from copyfix.measure import decode
from copyfix.measure.decode import model, workers

MODE = emulation.activate()  # before flag_gems is imported

import torch  # noqa: E402

import flag_gems  # noqa: E402

pytestmark = pytest.mark.harness
cpu_only = pytest.mark.skipif(
    MODE != "cpu", reason="the tiny decode is the cpu emulation's config"
)


@pytest.fixture(scope="module")
def tiny_section():
    """The kunlunxin_emulated section of the tiny config, run once for the module."""
    return decode.kunlunxin_section(["tiny"])


@cpu_only
def test_tiny_decode_on_the_kunlunxin_emulation_equal_with_cache_on_and_off(
    tiny_section,
):
    (run,) = tiny_section["configs"]
    assert tiny_section["mode"] == "cpu" and tiny_section["gems_vendor"] == "kunlunxin"
    assert tiny_section["composed"] and tiny_section["transformers"]
    assert run["tokens_equal_cache_off"] is True
    assert run["tokens_equal_device_model_off"] is True
    # the launch cache serves the generic pointwise_dynamic only: the
    # kunlunxin codegen's pointwise ops run uncached (the generic ones the kunlunxin
    # backend borrows, on main 2026-08-21, are counted)
    assert "kunlunxin" not in run["pointwise_calls_by_codegen"]
    _same_as_eager(run)
    # every op runs: none left out from the start, none left out for raising
    assert decode.CPU_EXCLUDED == {} and run["ops_excluded"] == {}
    # no strided aten copy
    assert run["strided_aten_fallbacks"] == 0 and run["fallbacks"] == []
    assert tiny_section["strided_aten_fallbacks"] == 0


def _same_as_eager(run):
    """fp32 on the interpreter: the same tokens as eager torch, logits within rounding."""
    assert run["vs_eager"]["tokens_equal"]
    assert run["vs_eager"]["first_divergence"] is None
    assert run["vs_eager"]["max_logit_diff"] < 1e-4


@cpu_only
def test_tiny_decode_records_every_copy_call_site(tiny_section):
    (run,) = tiny_section["configs"]
    # the model's own copies (the generate loop's cache and inputs) reach the
    # kunlunxin copy_, each listed with where it came from
    assert run["copy_calls"] > 0
    assert sum(entry["count"] for entry in run["copy_call_sites"]) == run["copy_calls"]
    for entry in run["copy_call_sites"]:
        assert set(entry) == {"op", "call_site", "dst", "src", "count"}
        assert entry["call_site"] and "/" in entry["call_site"]
    assert any("transformers/" in e["call_site"] for e in run["copy_call_sites"])


def test_copy_calls_are_recorded_inside_use_gems_and_run():
    record = []
    src = torch.arange(12.0, device=emulation.device()).reshape(3, 4)
    dst = torch.empty(4, 3, device=src.device)
    with flag_gems.use_gems(include=["copy_"]):
        with model.copy_calls_recorded(record):
            dst.copy_(src.t())  # (the kunlunxin copy_ with its real strides)
        dst.copy_(src.t())  # after the block: not listed
    assert torch.equal(dst, src.t())
    (entry,) = record
    assert "test_decode.py" in entry["call_site"] and entry["op"] is None
    assert entry["src"] == {"shape": [4, 3], "stride": [1, 4], "dtype": "float32"}


@pytest.fixture(scope="module")
def nvidia_cpu_section(tmp_path_factory):
    """The tiny decode on the NVIDIA backend in a fresh process, every op included at
    first (those that raise are left out as they come)."""
    tmp = tmp_path_factory.mktemp("nvidia-cpu")
    return workers.nvidia_cpu_process(["tiny"], tmp, timeout=600, every_op=True)


@cpu_only
def test_tiny_decode_on_the_nvidia_backend_runs_the_generic_codegen_on_the_interpreter(
    nvidia_cpu_section,
):
    section = nvidia_cpu_section
    (run,) = section["configs"]
    assert section["mode"] == "cpu" and section["gems_vendor"] == "nvidia"
    assert section["composed"] and section["transformers"]
    # this session is still the kunlunxin one
    assert emulation.CPU_VENDOR == "kunlunxin"
    assert os.environ["GEMS_VENDOR"] == "kunlunxin"
    # the pointwise ops went through the generic codegen, through the launch cache
    calls = run["pointwise_calls_by_codegen"]
    assert calls["generic"] > 0 and calls.get("kunlunxin", 0) == 0
    cache = run["cache"]
    assert cache["hits"] > 0 and cache["recordings"] > 0
    assert run["tokens_equal_cache_off"] is True
    _same_as_eager(run)
    # exactly the listed ops left out, both ways: one that now raises, or one listed
    # that no longer does
    assert section["every_op"] is True
    assert set(run["ops_excluded"]) == set(decode.CPU_NVIDIA_EXCLUDED)


def test_the_cpu_vendor_is_kunlunxin_unless_asked(monkeypatch):
    monkeypatch.delenv(emulation.ENV_CPU_VENDOR, raising=False)
    assert emulation.cpu_vendor() == "kunlunxin"
    monkeypatch.setenv(emulation.ENV_CPU_VENDOR, "nvidia")
    assert emulation.cpu_vendor() == "nvidia"
    monkeypatch.setenv(emulation.ENV_CPU_VENDOR, "cambricon")
    with pytest.raises(ValueError, match="COPYFIX_CPU_VENDOR"):
        emulation.cpu_vendor()
    env = workers.nvidia_cpu_env(Path("/tmp/x"))
    assert env[emulation.ENV_CPU_VENDOR] == "nvidia"
    assert env["COPYFIX_EMULATION"] == "cpu" and "GEMS_VENDOR" not in env
    assert env["FLAGGEMS_CACHE_DIR"] == "/tmp/x" and "FLAGGEMS_DB_URL" not in env


def test_the_recording_device_model_lists_a_strided_copy_and_runs_it():
    src = torch.arange(12.0).reshape(3, 4)
    dst = torch.empty(4, 3)
    record = []
    with emulation.xpu_device_model("cpu", record=record):
        dst.copy_(src.t())  # aten's strided copy: listed, then run
        torch.empty(3, 4).copy_(src)  # a flat loop: not listed
    assert torch.equal(dst, src.t())
    (entry,) = record
    assert entry["via"] == "dispatch" and entry["op"] is None
    assert "test_decode.py" in entry["call_site"]
    assert entry["src"] == {"shape": [4, 3], "stride": [1, 4], "dtype": "float32"}
    # under use_gems FlagGems' copy_ takes the copy (its Triton route): nothing listed
    with emulation.xpu_device_model("cpu", record=record):
        with flag_gems.use_gems(include=["copy_"]):
            dst.zero_().copy_(src.t())
    assert len(record) == 1 and torch.equal(dst, src.t())


def test_the_device_model_still_raises_without_a_record():
    with emulation.xpu_device_model("cpu"), pytest.raises(torch.AcceleratorError):
        torch.empty(4, 3).copy_(torch.ones(3, 4).t())


def test_the_stock_variant_imports_the_base_alone(tmp_path):
    base = workers.base_only(tmp_path / "base-only")
    assert not (base / "flag_gems" / "utils" / "launch_cache.py").exists()
    find = "import importlib.util as u; print(u.find_spec('flag_gems').origin)"
    for variant, where in (("base", str(base)), ("composed", "build/composed")):
        env = workers.worker_env(variant, "nvidia", base)
        assert env["GEMS_VENDOR"] == "nvidia" and "COPYFIX_EMULATION" not in env
        origin = subprocess.run(
            [sys.executable, "-c", find], env=env, capture_output=True, text=True
        ).stdout
        assert where in origin, (variant, origin)


def test_the_workers_alternate():
    assert workers.schedule(list(decode.VARIANTS), 2) == [
        (0, "base"), (0, "composed"), (0, "composed_cache_off"),
        (1, "composed"), (1, "composed_cache_off"), (1, "base"),
    ]  # fmt: skip


def test_the_budget_keeps_the_reserve_by_each_kind_s_last_duration(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    budget = Budget(total=300, reserve=100)
    assert budget.fits_another("base")  # nothing timed yet

    def work(seconds):
        now[0] += seconds

    budget.timed("base", work, 120)  # the first base process compiles
    budget.timed("composed", work, 30)
    # 150 s left, 100 kept: a base (last 120 s) does not fit, a composed (30 s) does,
    # and a kind not timed yet is expected to take as long as the last worker
    assert not budget.fits_another("base")
    assert budget.fits_another("composed") and budget.fits_another("other")
    assert Budget(None, 100).fits_another("base")
    # a run's own limit leaves the reserve too (the first of a kind may compile for long)
    assert budget.spare() == 50 and Budget(None, 100).spare() is None
    now[0] += 60
    assert budget.spare() == 1.0  # (never 0: a timeout of 0 would mean none)


def test_the_ops_left_out_on_nvidia_are_named_per_known_base():
    """Each base NVIDIA_EXCLUDED names is one the emulation knows (a misspelt key would
    silently leave nothing out), and main, the decode's base, leaves nothing out."""
    from copyfix.emulation import FLAGGEMS_BASES
    from copyfix.measure.decode.model import NVIDIA_EXCLUDED

    assert set(NVIDIA_EXCLUDED) <= set(FLAGGEMS_BASES)
    assert "mul" in NVIDIA_EXCLUDED["5.0.2"]
    assert NVIDIA_EXCLUDED.get("main-2026-08-21", {}) == {}


def test_against_compares_logits_up_to_the_first_divergence():
    ref = torch.tensor([[1, 2, 3]])
    logits = [torch.zeros(1, 4) for _ in range(3)]
    moved = [logits[0] + 0.5, logits[1] + 0.25, logits[2] + 9.0]
    keys = ("tokens_equal", "first_divergence", "max_logit_diff")
    same = model.against(ref.clone(), moved, ref, logits)
    assert same == dict(zip(keys, (True, None, 9.0), strict=True))
    parted = model.against(torch.tensor([[1, 5, 6]]), moved, ref, logits)
    assert parted == dict(zip(keys, (False, 1, 0.5), strict=True))


def _row(variant, x, sha="aa", other=True, hits=30):
    row = {
        "variant": variant, "config": "small", "eager_tok_s": 100.0, "tok_s": 100.0 / x,
        "x_eager": x, "tokens_sha": sha, "vs_eager": {"tokens_equal": True},
        "cache_timed": None, "ops_excluded": {},
    }  # fmt: skip
    if variant != "base":
        row["tokens_equal_other_cache_setting"] = other
    if variant == "composed":
        row["cache_timed"] = {"hits": hits, "misses": 10, "recordings": 2}
    return row


def test_combine_takes_medians_over_processes_and_keeps_each():
    rows = [_row("base", x) for x in (5.0, 7.0, 6.0)]
    rows += [_row("composed", x) for x in (2.2, 2.4, 2.0)]
    rows += [_row("composed_cache_off", x) for x in (5.5, 5.0, 6.0)]
    c = workers.combine(rows)
    assert c["base_x_eager"] == 6.0 and c["composed_x_eager"] == 2.2
    assert c["composed_x_eager_per_process"] == [2.2, 2.4, 2.0]
    assert c["cache"]["hits"] == 90 and c["cache"]["hit_rate"] == 0.75
    assert c["tokens_equal_cache_off"] is True
    # one process whose tokens differ with the other cache setting, or across processes
    assert workers.combine(rows[:-1] + [_row("composed_cache_off", 0.7, other=False)])[
        "tokens_equal_cache_off"
    ] is False  # fmt: skip
    assert workers.combine(rows[:-1] + [_row("composed_cache_off", 0.7, sha="bb")])[
        "tokens_equal_cache_off"
    ] is False  # fmt: skip


def test_report_lines_render_the_table(tmp_path):
    rows = [
        _row(v, x)
        for v, x in (("base", 0.5), ("composed", 0.8), ("composed_cache_off", 0.6))
    ]
    record = {
        "configs": {"small": {**decode.CONFIGS["small"].__dict__, **workers.combine(rows)}},
        "processes": 1, "rounds": 3,
        "runs": {"base": {"machine": "NVIDIA H200, 16 CPU cores", "mode": "nvidia"}},
        "op_commit": "0123456789abcdef", "date": "2026-12-04 20:00 UTC",
        "kunlunxin_emulated": {"mode": "cuda", "strided_aten_fallbacks": 0, "configs": [
            {"config": "small", "tokens_equal_device_model_off": True,
             "tokens_equal_cache_off": True, "ops_excluded": {}}]},
    }  # fmt: skip
    path = tmp_path / "decode_h200.json"
    path.write_text(json.dumps(record))
    lines = decode.report_lines(path)
    row = next(line for line in lines if line.startswith("| small"))
    assert "| 100.0 | 0.500 | 0.800 | 0.600 | 75.0% | yes |" in row
    assert any("0 copies reached aten's strided kernel" in line for line in lines)
    missing = decode.report_lines(tmp_path / "missing.json")
    assert any("No decode record stands" in line for line in missing)
