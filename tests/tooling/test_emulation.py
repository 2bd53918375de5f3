"""Tests of copyfix.emulation itself, in whatever mode activate() selects; where a mode
cannot do something, the test checks what it does instead (skips count as failures)."""

import contextlib
import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
import threading
import types
from pathlib import Path
from unittest import mock

import pytest

from copyfix import emulation, tracking

MODE = emulation.activate()  # before flag_gems is imported

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import flag_gems  # noqa: E402

pytestmark = pytest.mark.harness
REPO = Path(__file__).resolve().parents[2]

COPY_OP = torch.ops.aten.copy_.default
COMPOSITE = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)
DEV = emulation.device()


@pytest.fixture
def spies():
    module = emulation.copy_module()
    with tracking.track(module) as paths:
        yield types.SimpleNamespace(module=module, paths=paths)


def kernel_copy(spies, src, dtype):
    dst = torch.empty(src.shape, dtype=dtype, device=DEV)
    launches = len(spies.paths.ranks)
    spies.module.copy_(dst, src)
    assert spies.paths.fallbacks == 0, "went to torch's fallback, not the kernel"
    assert len(spies.paths.ranks) == launches + 1
    return dst


def bits(t):
    return t.view(getattr(torch, f"int{8 * t.element_size()}"))


def assert_same_bits(out, ref):
    """Bit-for-bit equality; NaNs (whose payloads differ even in torch) by place."""
    assert out.dtype == ref.dtype and out.shape == ref.shape
    nan = torch.isnan(ref.float())
    assert torch.equal(torch.isnan(out.float()), nan)
    torch.testing.assert_close(bits(out)[~nan], bits(ref)[~nan], rtol=0, atol=0)


def fp32_rounding_cases():
    rng = np.random.default_rng(1234)
    bf = rng.integers(0, 0x10000, 400, dtype=np.uint32) << 16  # bf16 values, as fp32
    finite = bf[(bf & 0x7F800000) != 0x7F800000]
    subnormals = rng.integers(0, 0x800000, 100, dtype=np.uint32)
    subnormals[50:] |= 0x80000000
    # +-0, +-inf, NaNs (quiet, signalling), fp32 max (rounds to inf), around the bf16
    # max, subnormal ties, 1 + tie (to even down / up)
    specials = [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
                0x7F800001, 0x7FFFFFFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F7FFF, 0x7F7F8000,
                0x7F7F8001, 0x00000001, 0x00008000, 0x00018000, 0x007FFFFF, 0x00800000,
                0x3F808000, 0x3F818000, 0x4B808000]  # fmt: skip
    cases = [
        finite | 0x8000,  # exact ties, both even and odd bf16 neighbours
        finite | 0x7FFF,  # just below a tie
        finite | 0x8001,  # just above a tie
        finite | rng.integers(0, 0x10000, finite.size, dtype=np.uint32),
        subnormals,
        np.array(specials, dtype=np.uint32),
    ]
    return torch.from_numpy(np.concatenate(cases).view(np.float32).copy())


def test_activate_is_idempotent_reports_and_dispatches_to_the_kunlunxin_copy():
    assert emulation.activate() == emulation.activate(MODE) == MODE == emulation.MODE
    other = next(m for m in emulation.MODES if m != MODE)
    with pytest.raises(RuntimeError, match="already active"):
        emulation.activate(other)
    info = emulation.versions()
    assert (info["mode"], info["torch"]) == (MODE, torch.__version__)
    assert info["flag_gems"] == emulation.BASE in emulation.FLAGGEMS_BASES
    if MODE != "native":
        assert os.environ["GEMS_VENDOR"] == "kunlunxin"
    # the dispatched module is the kunlunxin copy, with the 1-D tile config
    module = emulation.copy_module()
    assert module is sys.modules["_kunlunxin.ops.copy"]
    assert module.__file__.replace("\\", "/").endswith("_kunlunxin/ops/copy.py")
    # what flag_gems registers for aten::copy_ is this module's copy_
    assert flag_gems.copy_ is module.copy_
    assert tracking.kernel_home(module)._copy_kernel.config.prefer_1d_tile is True
    assert flag_gems.runtime.device.vendor_name == "kunlunxin"


def test_generated_wrapper_launches_12_ctas(spies):
    module = tracking.kernel_home(spies.module)
    # (PR 3 composed: instantiate returns the generated wrapper behind its launch cache)
    overload = module._copy_kernel.instantiate(2)
    overload = getattr(overload, "__wrapped__", overload)
    source = open(overload.__code__.co_filename).read()
    cache = os.environ.get("FLAGGEMS_CACHE_DIR") or Path.home() / ".flaggems"
    assert str(cache) in overload.__code__.co_filename
    assert "num_ctas = 12 # XPU BLOCK_NUM" in source
    name = module._copy_kernel._scalar_fn.__name__
    kernel = overload.__globals__[f"{name}_kernel_rank_2"]
    src = torch.randn(4, 128, device=DEV)
    dst = torch.empty(4, 128, device=DEV, dtype=torch.float16)
    with contextlib.ExitStack() as stack:
        launch = stack.enter_context(mock.patch.object(kernel, "run", wraps=kernel.run))
        if MODE == "cpu":  # count the programs the interpreter actually runs
            from triton.runtime import interpreter

            builder = interpreter.interpreter_builder
            programs = stack.enter_context(
                mock.patch.object(builder, "set_grid_idx", wraps=builder.set_grid_idx)
            )
        overload(src, out0=dst)
        assert launch.call_count == 1
        assert tuple(launch.call_args.kwargs["grid"]) == (12, 1, 1)
        if MODE == "cpu":
            assert programs.call_count == 12
    assert torch.equal(dst, src.to(torch.float16))


def int_values(dtype):
    rng = np.random.default_rng(7)
    if dtype == torch.bool:
        return torch.from_numpy(rng.integers(0, 2, 64).astype(bool))
    info = torch.iinfo(dtype)
    values = [info.min, info.max, 0, 1, -1, 255, 257, 383, 385]
    if dtype in (torch.int32, torch.int64):
        # ties after the int->fp32 step: torch rounds int->fp32->bf16, unlike compiled
        # Triton's single rounding (test_conversions.py); the op matches torch
        values += [0x1008001, 0x1018001, 0x7FFFFFC0, -0x1008001, 2**24 + 1]
    if dtype == torch.int64:
        values += [2**62 + 2**38 + 1, -(2**53) - 1, 2**63 - 1, 2**40 + 2**32 + 2**31]
    values = [v for v in values if info.min <= v <= info.max]
    randoms = rng.integers(info.min, info.max, 200, dtype=np.int64, endpoint=True)
    return torch.tensor(values + randoms.tolist(), dtype=dtype)


def every_bf16():  # (bf16 subnormals included, which the stock interpreter maps wrongly)
    bits = np.arange(0, 0x10000, dtype=np.uint16).view(np.int16)
    return torch.from_numpy(bits.copy()).view(torch.bfloat16)


def in_int32_range(t):  # (float -> int outside the range is UB)
    return t[t.float().abs() < 2**31]


def fp16_every_7th():
    return torch.from_numpy(np.arange(0, 0x10000, 7, dtype=np.uint16).view(np.float16))


BIG_INT64 = [2**63 - 1, -(2**63), 2**53 + 1, -(2**62) - 3, 0x0123456789ABCDEF]
FLAGS = [True, False, True, True]
INTS = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)
# (float64 is not a Triton dtype on KunlunXIN: copy_ sends it to aten)
CONVERSIONS = {
    "fp32_to_bf16_nearest_even": (fp32_rounding_cases, torch.bfloat16),
    "fp32_to_fp16": (fp32_rounding_cases, torch.float16),
    "fp32_to_int32": (lambda: in_int32_range(fp32_rounding_cases()), torch.int32),
    "fp32_to_int64": (lambda: torch.tensor([-2.7, -0.5, 0.5, 2.7]), torch.int64),
    "fp16_to_bf16": (fp16_every_7th, torch.bfloat16),
    "bf16_to_fp32": (every_bf16, torch.float32),
    "bf16_to_fp16": (every_bf16, torch.float16),
    "bf16_to_int32": (lambda: in_int32_range(every_bf16()), torch.int32),
    "int64_to_int64": (lambda: torch.tensor(BIG_INT64), torch.int64),
    "int64_to_int32_wraps": (lambda: torch.tensor(BIG_INT64), torch.int32),
    "bool_to_bool": (lambda: torch.tensor(FLAGS), torch.bool),
    "bool_to_int64": (lambda: torch.tensor(FLAGS), torch.int64),
    "bool_to_fp32": (lambda: torch.tensor(FLAGS), torch.float32),
    **{
        f"{str(t)[6:]}_to_bf16": (functools.partial(int_values, t), torch.bfloat16)
        for t in INTS
    },
}


@pytest.mark.parametrize("case", CONVERSIONS)
def test_kernel_conversions_match_torch(spies, case):
    make, dtype = CONVERSIONS[case]
    src = make().to(DEV)
    assert_same_bits(kernel_copy(spies, src, dtype), src.to(dtype))


def base_copy(base, dst, src):
    """dst.copy_(src) through the base module (use_gems() routes only copy_module())."""
    if MODE == "cpu":
        with emulation.cpu_dispatch(base):
            return dst.copy_(src)
    return base.copy_(dst, src)


def test_xpu_failure_reproduces_the_bug_with_the_base_module():
    base = emulation.base_copy_module()
    a = torch.randn(128, device=DEV)
    dst = torch.empty(4, 128, device=DEV)
    with emulation.xpu_fallback_failure(), tracking.track(base) as paths:
        with pytest.raises(torch.AcceleratorError, match="invalid device") as failure:
            base_copy(base, dst, a.expand(4, 128))
        if MODE != "native":
            assert failure.value.error_code == 98  # cudaErrorInvalidDeviceFunction
        assert paths.fallbacks == 1 and paths.ranks == []
        src = torch.randn(4, 128, device=DEV)
        base_copy(base, dst, src)  # contiguous: through the Triton kernel
        assert len(paths.ranks) == 1 and paths.fallbacks == 1
        assert torch.equal(dst, src)
    if MODE != "native":
        base_copy(base, dst, a.expand(4, 128))  # everything restored
        assert torch.equal(dst, a.expand(4, 128))


def test_xpu_fallback_failure_spares_contiguous_fallbacks_and_composes_with_mocks():
    module = emulation.copy_module()
    z = torch.randn(8, dtype=torch.complex64, device=DEV)
    out = torch.empty(8, dtype=torch.complex64, device=DEV)
    # mock outside, failure inside: the failing call is still counted
    with mock.patch.object(COPY_OP, "redispatch", wraps=COPY_OP.redispatch) as fallback:
        with emulation.xpu_fallback_failure():
            module.copy_(out, z)  # complex: kunlunxin falls back; contiguous: works
            assert torch.equal(out, z)
            with pytest.raises(torch.AcceleratorError):
                module.copy_(out[::2], z[::2])
            with pytest.raises(torch.AcceleratorError):
                strided = torch.empty(3, 4, device=DEV).t()
                ones = torch.ones(4, 3, device=DEV)
                COPY_OP.redispatch(COMPOSITE, strided, ones, False)
        assert fallback.call_count == 3
    assert not isinstance(
        COPY_OP.__dict__.get("_handle"), emulation.faults._FaultyHandle
    )
    if MODE != "native":
        module.copy_(out[::2], z[::2])  # restored
        assert torch.equal(out[::2], z[::2])


def test_cpu_dispatch_routes_copy_to_kunlunxin_unregisters_and_never_recurses(spies):
    module = spies.module
    src, dst = torch.randn(3, 5, device=DEV), torch.empty(3, 5, device=DEV)
    zeros = torch.zeros(3, 5, device=DEV)
    # cpu mode looks module.copy_ up at each call; use_gems() registered the function itself
    with mock.patch.object(module, "copy_", wraps=module.copy_) as spy:
        with emulation.cpu_dispatch():
            dst.copy_(src)
            assert len(spies.paths.ranks) == 1 and spies.paths.fallbacks == 0
            if MODE == "cpu":  # (the interpreter's own write-back is not routed)
                assert spy.call_count == 1
                assert spy.call_args.args[0] is dst and spy.call_args.args[1] is src
                # isfinite copies the Python scalar inf into a 0-dim CPU tensor (a wrapped
                # number, handed to Python kernels as a float): CPU-internal, not routed
                assert torch.isfinite(dst).all()
                assert spy.call_count == 1
        assert torch.equal(dst, src)
        dst.copy_(zeros)
        assert len(spies.paths.ranks) == 1 and spy.call_count == (MODE == "cpu")
    assert torch.equal(dst, zeros)
    # complex -> real goes to torch's fallback in the base and in the overlay copy_
    a = torch.randn(3, 5, dtype=torch.complex64, device=DEV)
    with emulation.cpu_dispatch():
        dst.copy_(a)  # the fallback must not come back here
    assert spies.paths.fallbacks == 1 and len(spies.paths.ranks) == 1
    assert torch.equal(dst, a.real)


def record_base_file(monkeypatch, path):
    info = types.ModuleType("flag_gems._overlay_info")
    info.BASE_COPY_PATH = str(path)
    monkeypatch.setitem(sys.modules, "flag_gems._overlay_info", info)


def test_base_copy_module_loads_the_recorded_base_file_separately(
    tmp_path, monkeypatch
):
    current = emulation.copy_module()
    base_file = tmp_path / "copy.py"
    kept = Path(flag_gems.__file__).parent / "_overlay_preimages"
    kept /= emulation.kunlunxin.KUNLUNXIN_COPY_RELPATH
    # a pristine pre-image, moved elsewhere: the one the build kept, else the installed base
    shutil.copyfile(kept if kept.is_file() else current.__file__, base_file)
    record_base_file(monkeypatch, base_file)
    monkeypatch.setattr(emulation.kunlunxin, "_base_copy_module", None)
    base = emulation.base_copy_module()
    assert base is not current and base.__file__ == str(base_file)
    assert base.copy_ is not current.copy_ and base.copy_.__globals__ is vars(base)
    assert sys.modules["_kunlunxin.ops.copy"] is current
    src = torch.randn(10, device=DEV)
    dst = torch.empty(10, dtype=torch.bfloat16, device=DEV)
    with tracking.track(base) as paths:
        base.copy_(dst, src)
    assert len(paths.ranks) == 1
    assert_same_bits(dst, src.to(torch.bfloat16))


@pytest.mark.parametrize("record", ["edited_base_file", "none"])
def test_base_copy_module_refuses_a_file_that_is_not_a_known_base(
    tmp_path, monkeypatch, record
):
    monkeypatch.setattr(emulation.kunlunxin, "_base_copy_module", None)
    current = emulation.copy_module()
    if record == "none":  # as if no overlay were installed: the installed module
        monkeypatch.setitem(sys.modules, "flag_gems._overlay_info", None)
        digest = hashlib.sha256(open(current.__file__, "rb").read()).hexdigest()
        if digest in emulation.kunlunxin.BASE_COPY_SHA256:  # a plain flag-gems install
            assert emulation.base_copy_module() is current
            return
    else:
        base_file = tmp_path / "copy.py"
        base_file.write_text(open(current.__file__).read() + "\n# edited\n")
        record_base_file(monkeypatch, base_file)
    with pytest.raises(RuntimeError, match="not a known pristine base"):
        emulation.base_copy_module()


@pytest.mark.parametrize(
    "lib, fake",
    [("torch", "2.12.0+cpu"), ("triton", "3.7.0"), ("flag_gems", "5.1.0 at /x")],
)
def test_activate_refuses_versions_it_was_not_written_for(monkeypatch, lib, fake):
    real = emulation._installed_versions()
    monkeypatch.setattr(emulation, "_installed_versions", lambda: {**real, lib: fake})
    monkeypatch.setattr(emulation.state, "MODE", None)
    with pytest.raises(
        RuntimeError, match=rf"refuses to run.*{lib} {re.escape(fake)} \(written for"
    ):
        emulation.activate("cpu")
    assert emulation.state.MODE is None


def test_version_check_accepts_the_supported_versions(monkeypatch):
    for torch_version in ("2.13.0+cpu", "2.11.0+cu128", "2.11.1"):
        for base in emulation.FLAGGEMS_BASES:
            fake = {"torch": torch_version, "triton": "3.6.0", "flag_gems": base}
            monkeypatch.setattr(emulation, "_installed_versions", lambda f=fake: f)
            assert emulation._check_versions("cpu") == base
            assert emulation._check_versions("cuda") == base
    # native mode patches nothing, so it checks nothing
    fake = {"torch": "9.9", "triton": "9.9", "flag_gems": "6.0 at /x"}
    monkeypatch.setattr(emulation, "_installed_versions", lambda: fake)
    assert emulation._check_versions("native") is None


def fake_package(tmp_path, *extra):
    package, fake = Path(flag_gems.__file__).parent, tmp_path / "flag_gems"
    for rel in [*emulation.FLAGGEMS_BASES[emulation.BASE], *extra]:
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        kept = package / "_overlay_preimages" / rel
        shutil.copy(kept if kept.is_file() else package / rel, fake / rel)
    return fake


def test_the_base_is_read_from_the_flag_gems_that_is_imported(tmp_path):
    # (never from a distribution's metadata: a composed install carries the overlay's)
    assert emulation.flag_gems_dir() == Path(flag_gems.__file__).parent.resolve()
    assert emulation.flag_gems_base() == emulation.BASE
    # a package whose files match no known base is named by what it declares
    fake = fake_package(tmp_path)
    assert emulation.flag_gems_base(fake) == emulation.BASE
    (fake / "utils" / "libentry.py").write_text("# another LibEntry\n")
    (fake / "__init__.py").write_text('__version__ = "5.4.0"\n')
    assert emulation.flag_gems_base(fake) is None
    assert emulation._declared_flag_gems_version(fake) == "5.4.0"
    # (upstream-ci applies the launch-cache PR to a checkout; another edit is no base)
    from copyfix.compose import apply_patch

    rel = "utils/pointwise_dynamic.py"
    fake = fake_package(tmp_path / "pr3", rel)
    patch = (REPO / "src" / "flag_gems" / f"{rel}.patch").read_text()
    pre = (fake / rel).read_text()
    (fake / rel).write_text(apply_patch(pre, patch, rel))
    assert apply_patch((fake / rel).read_text(), patch, rel, reverse=True) == pre
    assert emulation.flag_gems_base(fake) == emulation.BASE
    kunlunxin = "runtime/backend/_kunlunxin/utils/pointwise_dynamic.py"
    (fake / kunlunxin).write_text((fake / kunlunxin).read_text() + "# another edit\n")
    assert emulation.flag_gems_base(fake) is None


def test_shims_xpu_libdevice_launch_options_and_generated_configs():
    kernel = types.SimpleNamespace(arg_names=["x", "unroll_num"])
    kept = {"num_warps": 4, "unroll_num": 2, "tile_size": 64}
    xpu = ["buffer_size_limit", "isCloseOffsetAnalysis", "isOpenCmpNan",
           # the ones the pattern misses
           "is_use_mask_zero", "isCLOSE_TTXPU_O_ATOMIC_SIM", "groups_per_cluster",
           "is_sdnn"]  # fmt: skip
    kwargs = {**kept, **dict.fromkeys(xpu, 1)}
    assert emulation.shims.strip_xpu_launch_options(kernel, kwargs) == kept
    import triton.language as tl
    from triton.language.extra.xpu import libdevice

    assert tl.extra.xpu.libdevice is libdevice
    assert callable(libdevice.xpu_trunc_div) and callable(libdevice.rint)
    if MODE == "native":  # KunlunXIN's own Triton and FlagTree's autotuner
        return
    from triton.language.extra.cuda import libdevice as cuda

    from copyfix.emulation import xpu_libdevice

    assert libdevice.rint is cuda.rint and libdevice.tan is cuda.tan
    # the names the kunlunxin ops reach: the interpreter's stand-ins in cpu mode
    for name in xpu_libdevice.STAND_INS:
        expected = xpu_libdevice if MODE == "cpu" else cuda
        assert getattr(libdevice, name) is getattr(expected, name), name
    for name in emulation.shims.XPU_ONLY_LIBDEVICE:
        with pytest.raises(NotImplementedError, match=name):
            getattr(libdevice, name)(1, 2)
    config = emulation.shims.generated_config
    shape = {"M": 3, "N": 100, "K": 32}
    # the keys each op's kernel reads; powers of two in [16, 64]; a dimension that is
    # not a power of two gets a tile that does not divide it (the masked paths run)
    assert config("mm", shape).kwargs == {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 32}
    assert config("bmm", shape).kwargs == {"TILE_M": 16, "TILE_N": 64, "TILE_K": 32}
    addmm = config("addmm", {"M": 1, "N": 17, "K": 4096}).kwargs
    assert addmm == {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64}
    with pytest.raises(NotImplementedError, match="index_add"):
        config("index_add", shape)


@pytest.mark.parametrize(
    "op, fn",
    [
        # (the matmuls take their configs from the generate_configs stand-in)
        ("mm", lambda x, w, c: torch.mm(x, w)),
        ("bmm", lambda x, w, c: torch.bmm(x[None], w[None])[0]),
        ("addmm", lambda x, w, c: torch.addmm(c, x, w)),
        # (each needed a shim in cpu mode: the libdevice stand-ins, dtype and bool
        # arguments, where's device pick, the CPU device object)
        ("rsqrt", lambda x, w, c: torch.rsqrt(x.abs() + 0.5)),
        ("pow_tensor_scalar", lambda x, w, c: x.pow(2)),
        ("pow_tensor_scalar", lambda x, w, c: x.abs().pow(0.5)),
        ("argmax", lambda x, w, c: torch.argmax(x, dim=-1)),
        ("where_self", lambda x, w, c: torch.where(x > 0, x, torch.zeros_like(x))),
        ("full", lambda x, w, c: torch.full((3, 5), True, device=x.device)),
        ("fill_scalar_", lambda x, w, c: x.new_empty(7, dtype=torch.bool).fill_(True)),
        ("mean_dim", lambda x, w, c: x.mean(-1, keepdim=True)),
        ("embedding", lambda x, w, c: F.embedding(torch.tensor([[1, 3]]).to(DEV), x)),
    ],
)
def test_kunlunxin_ops_the_decode_reaches_match_torch(op, fn):
    g = torch.Generator().manual_seed(1)
    x, w, c = (torch.randn(*s, generator=g).to(DEV) for s in ((4, 33), (33, 40), (40,)))
    with flag_gems.use_gems(include=[op]):
        got = fn(x, w, c)
    tol = 1e-4 if op.endswith("mm") else 1e-6
    torch.testing.assert_close(got, fn(x, w, c), rtol=tol, atol=tol)


def test_cpu_device_guard_where_device_pick_and_benchmark():
    device = torch.device("cpu")
    if MODE != "cpu":  # torch's own check: a cuda device is expected
        with pytest.raises(ValueError, match="Expected a cuda device"):
            torch.cuda.device(device)
        return
    from copyfix.emulation import interpreter

    idx = [interpreter.no_device_index(d) for d in (None, device, "cpu", 0)]
    assert idx == [-1, -1, -1, 0]
    with torch.cuda.device(device), torch.cuda._DeviceGuard(None):
        pass
    # where keeps the emulated device only where every operand is on it
    pick = interpreter._emulated_device_filter
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    not_cpu = lambda k: k.type != "cpu"  # noqa: E731  (the where modules' predicate)
    assert list(pick(not_cpu, [cpu, cpu])) == [cpu, cpu]
    assert list(pick(not_cpu, [cpu, cuda])) == [cuda]
    assert list(pick(not_cpu, [])) == []
    assert list(pick(lambda k: False, [1, 2])) == []
    modules = [sys.modules.get(name) for name in interpreter.WHERE_MODULES]
    assert all(m.filter is pick for m in modules if m is not None)
    # the interpreter benchmark runs each config once
    calls, bench = [], interpreter.interpreter_benchmark
    assert bench(lambda: calls.append(1), quantiles=(0.5, 0.2)) == [0.0, 0.0]
    assert bench(lambda: calls.append(2), warmup=25, rep=100) == 0.0
    assert calls == [1, 2]


CHILD_CUDA = """
from copyfix import emulation as e
assert e.activate('cuda') == 'cuda'
import triton
from triton.runtime import interpreter
from triton.runtime.jit import JITFunction
import triton.language.extra.xpu.libdevice as x
assert JITFunction.run._copyfix_patched and triton.autotune._copyfix_patched
assert not getattr(interpreter, '_copyfix_patched', False)
assert 'flag_gems' not in sys.modules
"""
# an xdist worker inherits TRITON_INTERPRET=1 from a cpu-mode controller: Triton
# imported with it set makes its own @jit functions stock InterpretedFunctions
CHILD_CPU = """
from copyfix import emulation as e
assert e.activate('cpu') == 'cpu'
a = torch.arange(12.0).reshape(3, 4)
d = torch.empty(4, 3)
e.copy_module().copy_(d, a.t())
assert torch.equal(d, a.t())
"""


# cuda mode applies exactly its patches (without a GPU, without flag_gems)
@pytest.mark.parametrize(
    "code, env",
    [
        (CHILD_CUDA, {}),
        (CHILD_CPU, {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}),
    ],
    ids=["cuda_activation", "cpu_under_inherited_triton_interpret"],
)
def test_activation_in_a_fresh_process(code, env):
    if MODE == "native":  # the XPU box's torch/triton are not the emulated versions
        assert emulation.activate("native") == "native"
        return
    drop = ("TRITON_INTERPRET", "GEMS_VENDOR", emulation.ENV_MODE)
    env = {**{k: v for k, v in os.environ.items() if k not in drop}, **env}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    code = "import sys, torch\n" + code + "print('ok')\n"
    run = dict(env=env, capture_output=True, text=True, timeout=300)
    result = subprocess.run([sys.executable, "-c", code], **run)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_a_launch_finishes_when_copy_sees_no_self_alias(monkeypatch):
    """cpu mode: the interpreter's write-back (a storage copied onto itself) must not
    reach copy_ under use_gems(), here blind to aliases (LibEntry's lock deadlocks)."""

    monkeypatch.setattr(torch._C, "_is_alias_of", lambda a, b: False)
    src = torch.arange(12.0).view(3, 4)
    dst = torch.zeros(4, 3, device=DEV)
    done = []

    def run():
        with flag_gems.use_gems(include=["copy_"]):
            dst.copy_(src.to(DEV).t())
        done.append(True)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(60)
    assert done, "the copy did not finish: the write-back re-entered copy_"
    assert torch.equal(dst.cpu(), src.t())
