"""_to_copy (Tensor.to, .bool(), ...) converts as torch does: the generic
flag_gems/ops/to.py (PR 2) and the KunlunXIN _kunlunxin/ops/to.py (PR 4).  A spy on the
kernel choice proves the PR tests reach the KunlunXIN op and fail with the pre-image's
kernel; the generic op is dispatched for aten::_to_copy and checked against torch.
"""

import contextlib
import importlib
import os
import sys
from unittest import mock

import pytest

from copyfix import emulation

MODE = emulation.activate()  # before flag_gems (and any kernel) is defined

import torch  # noqa: E402

import flag_gems  # noqa: E402
from copyfix.measure import generic_conversions as gc  # noqa: E402

pytestmark = pytest.mark.harness

KEY = "CPU" if MODE == "cpu" else "CUDA"
DEV = emulation.device()


kunlunxin_to = lambda: sys.modules["_kunlunxin.ops.to"]
generic_to = lambda: importlib.import_module("flag_gems.ops.to")


@contextlib.contextmanager
def spy_kernel_choice(module):
    """Counts the op's Triton path: every call of its kernel choice (the generic
    op's ``kernel_for``, taken from ops/copy.py; the KunlunXIN op's ``_kernel_for``)."""
    calls = []
    name = "kernel_for" if hasattr(module, "kernel_for") else "_kernel_for"
    stock = getattr(module, name)
    spy = lambda *args: calls.append(args) or stock(*args)
    with mock.patch.object(module, name, spy):
        yield calls


@contextlib.contextmanager
def dispatched(module):
    """``aten::_to_copy`` on the device's key runs ``module.to_copy`` while open."""
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_to_copy", lambda x, **kwargs: module.to_copy(x, **kwargs), KEY)
    try:
        yield
    finally:
        lib._destroy()


@pytest.fixture(scope="module")
def guard():
    with gc.cpu_device_guard() if MODE == "cpu" else contextlib.nullcontext():
        yield


# --- the PR tests reach the KunlunXIN op, and fail without its kernels


_pr_module = lambda: importlib.import_module("tests.test_copy_dtype_conversions")
_pr4_module = lambda: importlib.import_module("tests.test_to_copy_conversions")


# (src dtype, values, dst dtype, the PR test's method: None for .to(uint8))
REPORTED = [
    (gc.DTYPES[s], values, gc.DTYPES[d], None if d == "uint8" else d)
    for s, values, d in gc.TO_ISSUE_CASES
]


@pytest.mark.parametrize("case", REPORTED, ids=["bool", "uint8", "bfloat16"])
def test_pr_test_reaches_the_kunlunxin_op(case):
    with spy_kernel_choice(kunlunxin_to()) as calls:
        _pr_module().test_to_copy_dtype_conversion_reported_cases(*case)
    assert calls == [(case[0], case[2])]


def _fails(call, *args):
    """call(*args) fails as a PR test fails: a wrong value, or (int32 -> bf16 in cpu
    mode) the toolchain model's compile error for the identity kernel."""
    try:
        call(*args)
    except AssertionError:
        return
    except Exception as exc:  # (the interpreter wraps it in an InterpreterError)
        assert "copyfix model of the KunlunXIN Triton toolchain" in str(exc), exc
        assert args[0] is torch.int32 and MODE == "cpu", args
        return
    raise AssertionError(f"{call.__name__}{args} passed")


def test_pr_tests_fail_with_the_preimage_kernel(monkeypatch):
    module = kunlunxin_to()
    monkeypatch.setattr(module, "_kernel_for", lambda s, d: module._to_copy_func)
    pr = _pr_module()
    for case in REPORTED:
        if MODE == "cpu" and case[2] == torch.uint8:
            continue  # the interpreter wraps -1.5 into uint8 as numpy does (255)
        _fails(pr.test_to_copy_dtype_conversion_reported_cases, *case)
    _fails(pr.test_dtype_conversion, torch.int64, torch.bfloat16, "to_copy")
    _fails(_pr4_module().test_to_bfloat16, torch.int32, "contiguous")


def test_pr4_test_reaches_the_kunlunxin_op():
    with spy_kernel_choice(kunlunxin_to()) as calls:
        _pr4_module().test_reported_cases("bool")
    assert calls == [(torch.float32, torch.bool)] * 3  # (three layouts)


# --- the generic op, dispatched


@pytest.mark.parametrize("src_name", list(gc.DTYPES))
def test_generic_to_converts_as_torch_through_dispatch(guard, src_name):
    module, values, bad = generic_to(), gc.inputs(src_name), {}
    with spy_kernel_choice(module) as calls:
        for dst_name, dst_dtype in gc.DTYPES.items():
            for layout in gc.LAYOUTS:
                _, src = gc.layout_pair(values, dst_dtype, layout, DEV)
                # torch's, nothing of FlagGems dispatched (copy=True: a same-dtype
                # .to() reaches _to_copy too)
                ref = src.to(dst_dtype, copy=True)
                with dispatched(module):
                    got = src.to(dst_dtype, copy=True)
                n = gc.differing(got, ref, src)
                if n or got.stride() != ref.stride():
                    bad[f"{layout}-{src_name}->{dst_name}"] = (n, got.stride())
    assert bad == {}
    # float8 conversions go to aten; everything else takes a kernel of copy_
    triton = [d for d in gc.DTYPES if d == src_name or "float8" not in src_name + d]
    assert len(calls) == len(triton) * len(gc.LAYOUTS)


@pytest.mark.parametrize(
    "method, src_dtype, values",
    [
        ("bool", torch.float32, [0.5, -0.25, 2.0, 1e-45, float("nan")]),
        ("bfloat16", torch.int32, [16842753, -16842753]),
        ("half", torch.float64, [1 + 2**-11 + 2**-40, 65520 - 2**-20]),
        ("float", torch.float64, [1e300, 2.0**-149]),
    ],
)
def test_generic_tensor_methods_reach_the_op(guard, method, src_dtype, values):
    # under use_gems (every FlagGems op registered, copy_ included), the generic op
    # registered over the KunlunXIN _to_copy, as use_gems registers it on NVIDIA
    x = torch.tensor(values, dtype=src_dtype, device=DEV)
    ref = getattr(x, method)()
    # (use_gems leaves _to_copy out: torch refuses a second Python kernel on one key)
    gems = flag_gems.use_gems(exclude=["_to_copy", "to_copy"])
    with spy_kernel_choice(generic_to()) as calls, gems:
        with dispatched(generic_to()):
            got = getattr(x, method)()
    assert len(calls) == 1 and gc.differing(got, ref, x) == 0


# --- semantics kept: fallbacks, layouts, errors


@pytest.mark.parametrize("which", ["generic", "kunlunxin"])
def test_fallbacks_and_layouts(guard, which):
    module = generic_to() if which == "generic" else kunlunxin_to()
    x = torch.arange(24, dtype=torch.float32, device=DEV).reshape(2, 3, 4) - 5.5
    contiguous, last = torch.contiguous_format, torch.channels_last
    triton = [  # dense: strides kept; not dense: contiguous; or as asked
        lambda: x.permute(2, 0, 1).to(torch.uint8),
        lambda: x[:, ::2].to(torch.bool),
        lambda: x.transpose(0, 2).to(torch.bfloat16, memory_format=contiguous),
        lambda: x.reshape(1, 2, 3, 4).to(torch.int32, memory_format=last),
    ]
    with spy_kernel_choice(module) as calls, dispatched(module):
        meta = x.to("meta", torch.float16)  # a transfer: aten
        cplx = x.to(torch.complex64)  # complex: aten
        f8 = x.to(torch.float8_e5m2)  # float8 conversion: aten
        assert not calls
        outs = [conversion() for conversion in triton]
    assert len(calls) == 4
    assert meta.device.type == "meta" and meta.dtype == torch.float16
    assert torch.equal(cplx, x.to(torch.complex64))
    assert torch.equal(f8.view(torch.uint8), x.to(torch.float8_e5m2).view(torch.uint8))
    for got, ref in zip(outs, (conversion() for conversion in triton)):
        assert got.stride() == ref.stride() and torch.equal(got, ref)


@pytest.mark.parametrize("which", ["generic", "kunlunxin"])
def test_bad_input_raises_as_torch(guard, which):
    module = generic_to() if which == "generic" else kunlunxin_to()
    x = torch.ones(4, device=DEV)
    with pytest.raises(RuntimeError) as torch_error:
        x.to(torch.bfloat16, memory_format=torch.channels_last)
    with dispatched(module), pytest.raises(RuntimeError) as ours:
        x.to(torch.bfloat16, memory_format=torch.channels_last)
    assert str(ours.value) == str(torch_error.value)


# --- the KunlunXIN op scopes TRITONXPU_BF16_FAST and TRITONXPU_ELEMBYTES to its launch


def test_kunlunxin_launch_environment(guard, monkeypatch):
    module = kunlunxin_to()
    seen = []

    names = ("TRITONXPU_BF16_FAST", "TRITONXPU_ELEMBYTES")
    env = lambda: tuple(os.environ.get(name) for name in names)
    record = lambda stock: lambda *a, **k: seen.append(env()) or stock(*a, **k)

    stock_choice = module._kernel_for
    monkeypatch.setattr(module, "_kernel_for", lambda s, d: record(stock_choice(s, d)))
    monkeypatch.delenv("TRITONXPU_BF16_FAST", raising=False)
    monkeypatch.setenv("TRITONXPU_ELEMBYTES", "4")  # a caller's own value
    x = torch.tensor([1.00390625, 1.01171875, -3.0], device=DEV)
    module.to_copy(x, dtype=torch.bfloat16)
    module.to_copy(x, dtype=torch.int64)
    assert seen == [("1", "4"), ("1", "8")]
    assert os.environ["TRITONXPU_ELEMBYTES"] == "4"
    assert "TRITONXPU_BF16_FAST" not in os.environ
    monkeypatch.delenv("TRITONXPU_ELEMBYTES")
    module.to_copy(x, dtype=torch.float64)
    assert "TRITONXPU_ELEMBYTES" not in os.environ


def test_host_check_is_the_emulation_s_only_change():
    # the files send host tensors to aten; cpu mode alone treats the CPU as the device
    from copyfix.emulation import interpreter

    for name in interpreter.TO_COPY_MODULES:
        module = sys.modules[name]
        path = module.__file__
        fresh = gc._load(path, name.rsplit(".", 1)[0] + "._copyfix_fresh_to")
        cpu = torch.zeros(2)
        assert fresh._is_host_or_transfer(cpu, cpu.device)
        assert fresh._is_host_or_transfer(cpu, torch.device("meta"))
        patched = module._is_host_or_transfer is interpreter._is_transfer
        assert patched == (MODE == "cpu")


def test_measurement_counts_before_and_after(guard):
    names = ["bool", "uint8", "int32", "bfloat16", "float32"]
    for op in ("to_copy", "kunlunxin_to_copy"):
        summary = gc.summarise(gc.measure(gc.generic_ops(op), DEV, names))
        assert summary["before_differ"] > 0 and summary["after_differ"] == 0
        assert summary["after_errors"] == 0


def test_kunlunxin_kernels_compile_with_only_the_f32_bf16_store_left(guard, tmp_path):
    # Compiled Triton (PTX for sm_90, no GPU): every bfloat16 output but float32's is
    # stored as the bits the kernel rounded; float32 keeps the backend's f32 -> bf16
    # store (what TRITONXPU_BF16_FAST selects on the XPU); the pre-image converts all.
    from test_generic_copy import _ptx  # (tests/overlay is on sys.path, no package)

    module, plain = kunlunxin_to(), "_to_copy_func"
    plan = {
        f"{src}->bfloat16": module._kernel_for(gc.DTYPES[src], torch.bfloat16)
        for src in ("int32", "int16", "float16", "float32", "float64", "bool")
    }
    plan = {pair: kernel._scalar_fn.__name__ for pair, kernel in plan.items()}
    own = gc.scalar_functions(module.__file__)  # (the rest are copy_'s kernels)
    mine = {k: v for k, v in plan.items() if v in own}
    shared = {k: v for k, v in plan.items() if v not in own}
    after = _ptx(module.__file__, mine, tmp_path)
    strided = sys.modules["_kunlunxin.ops.strided_copy"].__file__
    after.update(_ptx(strided, shared, tmp_path))
    preimage = gc.generic_ops("kunlunxin_to_copy")["before_file"]["path"]
    before = _ptx(preimage, dict.fromkeys(plan, plain), tmp_path)
    # float32 keeps the hardware store; bool's 0/1 need no rounding
    assert mine == dict.fromkeys(["float32->bfloat16", "bool->bfloat16"], plain)
    assert set(shared.values()) == {"_to_bf16_kernel"}
    for pair, cvts in after.items():
        bf16 = [c for c in cvts if ".bf16." in c]
        assert bool(bf16) == (pair == "float32->bfloat16"), (pair, cvts)
    assert "cvt.rn.bf16.s32" in before["int32->bfloat16"]
    assert "cvt.rn.bf16.f64" in before["float64->bfloat16"]
