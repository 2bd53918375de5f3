"""The KunlunXIN device model (copyfix.emulation.faults): one test per rule, on the
CUDA key in cuda mode, on the CPU key for each test's scope in cpu mode."""

import importlib

import pytest
import torch

import flag_gems
from copyfix import emulation
from copyfix.emulation import faults

pytestmark = pytest.mark.harness

MODE = emulation.require("cpu", "cuda")
DEVICE_TYPE = "cpu" if MODE == "cpu" else "cuda"
DEV = emulation.device()
COMPOSITE = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)


def model():
    return emulation.xpu_device_model(DEVICE_TYPE)


def assert_faults(fn):
    with pytest.raises(torch.AcceleratorError, match="invalid device function") as info:
        fn()
    assert info.value.error_code == 98


def grid(*shape, dtype=torch.float32):
    n = torch.Size(shape).numel()
    return torch.arange(n, dtype=torch.float32).reshape(shape).to(dtype).to(DEV)


# rule 1: a flat loop runs, anything else faults
same = lambda make: (make(), make())
FLAT = {
    "contiguous": lambda: same(lambda: grid(4, 6)),
    "conversion": lambda: (grid(4, 6, dtype=torch.float16), grid(4, 6)),
    "both_transposed": lambda: same(lambda: grid(6, 4).t()),  # dense, equal strides
    "both_permuted": lambda: same(lambda: grid(2, 3, 4).permute(2, 0, 1)),
    "negated": lambda: (grid(4, 6), torch._neg_view(grid(4, 6))),
}
FAULTING = {
    "transpose": lambda: (grid(4, 6), grid(6, 4).t()),
    "strided_dst": lambda: (grid(6, 4).t(), grid(4, 6)),
    "expand": lambda: (grid(4, 6), grid(6).expand(4, 6)),
    "broadcast": lambda: (grid(4, 6), grid(6)),  # lower-rank source
    "zero_dim": lambda: (grid(4, 6), grid()),
    "step_slice": lambda: (grid(4, 3), grid(4, 6)[:, ::2]),
    "non_dense_equal_strides": lambda: (grid(4, 6)[:, :3], grid(4, 6)[:, 3:]),
    "other_shape": lambda: (grid(1, 24), grid(24)),  # same numel
}


@pytest.mark.parametrize("make", FLAT.values(), ids=FLAT)
def test_flat_loops_run(make):
    dst, src = make()
    with model():
        dst.copy_(src)
    assert torch.equal(dst, src.resolve_neg())


@pytest.mark.parametrize("make", FAULTING.values(), ids=FAULTING)
def test_other_copies_fault_and_write_nothing(make):
    dst, src = make()
    before = dst.clone()  # (outside the model: cloning a strided view faults too)
    with model():
        assert_faults(lambda: dst.copy_(src))
    assert torch.equal(dst, before)


# rule 1, whoever calls it
@pytest.mark.parametrize(
    "call",
    [
        lambda x: x[:, ::2].clone(),  # (a dense view keeps its strides: flat)
        lambda x: x.t().contiguous(),
        lambda x: x[:, ::2].to(torch.float16),
        lambda x: torch.ops.aten.copy_(torch.empty(6, 4, device=DEV), x.t()),
        lambda x: torch.ops.aten.copy_.default.redispatch(
            COMPOSITE, torch.empty(6, 4, device=DEV), x.t(), False
        ),
    ],
    ids=["clone", "contiguous", "to", "aten_copy_", "fallback_redispatch"],
)
def test_every_caller_meets_the_fault(call):
    x = grid(4, 6)
    with model():
        assert_faults(lambda: call(x))
    call(x)  # the model is gone with its scope


def test_a_dense_to_keeps_strides_and_runs():
    # _to_copy preserves a dense layout's strides: the copy is a flat loop
    x = grid(6, 4).t()
    with model():
        y = x.to(torch.float16)
    assert y.stride() == x.stride() and torch.equal(y, x.to(torch.float16))


# rule 2: aten's own errors and early returns come first
def aten_error(fn):
    with pytest.raises(Exception) as info:  # (aten must refuse it)
        fn()
    return info.type, str(info.value)


ATEN_ERRORS = {
    "size_mismatch": lambda: (grid(3, 4), grid(5, 4).t().t()[:, :4].t().t()),
    "broadcast_shape": lambda: (grid(4), grid(2, 4)),  # dst isn't the broadcast shape
    "internal_overlap": lambda: (grid(1, 4).expand(3, 4), grid(4, 3).t()),
    "meta_source": lambda: (grid(3, 4), torch.empty(4, 3, device="meta").t()),
    "partial_overlap": lambda: (lambda b: (b.t(), b))(grid(4, 4)),
}


@pytest.mark.parametrize("make", ATEN_ERRORS.values(), ids=ATEN_ERRORS)
def test_atens_own_errors_come_first(make):
    dst, src = make()
    expected = aten_error(lambda: dst.copy_(src))
    with model():
        assert aten_error(lambda: dst.copy_(src)) == expected


@pytest.mark.parametrize(
    "make",
    [
        lambda x: (x, x),  # x.copy_(x)
        lambda x: (x[:0], x.t()[:0]),  # empty
        lambda x: (torch.empty(4, 6, device=DEV), torch._efficientzerotensor(4, 6)),
    ],
    ids=["self", "empty", "zero_tensor_source"],
)
def test_early_returns_do_not_fault(make):
    dst, src = make(grid(6, 6))
    with model():
        dst.copy_(src)


# rule 4: FlagGems takes the copy while it is registered, whichever order
@pytest.fixture(params=[False, True], ids=["torch_default", "refusing"])
def either_override_policy(request, monkeypatch):
    """torch 2.11 (the GPU box) refuses a second Python kernel for one operator and
    key; torch 2.13 allows it by default: each test runs under both."""
    if request.param:
        stock = torch.library.Library.impl

        def refusing(self, op_name, fn, dispatch_key="", *, with_keyset=False, **_):
            return stock(self, op_name, fn, dispatch_key, with_keyset=with_keyset,
                         allow_override=False)  # fmt: skip

        monkeypatch.setattr(torch.library.Library, "impl", refusing)


@pytest.mark.usefixtures("either_override_policy")
def test_flag_gems_registered_later_takes_the_copy_and_the_model_comes_back():
    # the model must let FlagGems register over it, and a model opened inside use_gems
    # (the latest registration) shadows FlagGems, either way
    src = grid(6, 4)
    with model():
        with flag_gems.use_gems(include=["copy_"]):
            out = src.t().contiguous()  # dispatched to FlagGems' copy_
            with model():
                assert_faults(lambda: src.t().contiguous())
        assert_faults(lambda: src.t().contiguous())
    assert torch.equal(out, src.t())


@pytest.mark.usefixtures("either_override_policy")
def test_a_kernel_for_a_block_goes_over_use_gems_own():
    # emulation.aten_copy_kernel (the decode's copy_ recorder) inside use_gems: on
    # torch 2.11 a plain Library.impl would refuse it (FlagGems' copy_ is a Python
    # kernel on the same key); it must take the copy, and give it back after
    seen = []
    src = grid(6, 4)
    with flag_gems.use_gems(include=["copy_"]):
        gems_copy = emulation.copy_module().copy_

        def recorder(dst, s, non_blocking=False):
            seen.append(tuple(s.shape))
            return gems_copy(dst, s, non_blocking)

        with emulation.aten_copy_kernel(recorder, DEVICE_TYPE.upper()):
            out = src.t().contiguous()
        assert seen == [(4, 6)] and torch.equal(out, src.t())
        src.t().contiguous()  # FlagGems' own copy_ again
    assert seen == [(4, 6)]


def test_flag_gems_fallback_is_faulted_below_the_device_key():
    # FlagGems' fallback redispatches to aten below the device key; the model is
    # there too (the complex dtype goes to the fallback)
    z = torch.randn(4, 6, dtype=torch.complex64, device=DEV)
    out = torch.empty(6, 4, dtype=torch.complex64, device=DEV)
    with model():
        with flag_gems.use_gems(include=["copy_"]):
            assert_faults(lambda: out.copy_(z.t()))
            flat = torch.empty(4, 6, dtype=torch.complex64, device=DEV)
            flat.copy_(z)  # a contiguous complex copy is a flat loop: it runs
    assert torch.equal(flat, z)


# the defect the narrow fault missed: a benchmark baseline that is aten's strided copy
def test_the_model_catches_a_strided_benchmark_baseline():
    bench = importlib.import_module("benchmark.test_copy_strided")
    inputs = list(bench._layouts(16, torch.float32, torch.float32, DEV))
    with model():
        for dst, src in inputs:  # the old baseline: aten's copy of the strided pair
            assert_faults(lambda: torch.ops.aten.copy_(dst, src))
        for dst, src in inputs:  # the PR's baseline: contiguous buffers, a flat loop
            dst_flat = torch.empty(dst.shape, device=DEV)
            src_flat = torch.ones(dst.shape, device=DEV)
            bench._contiguous_copy(dst, src, dst_flat, src_flat)
            assert torch.equal(dst_flat, src_flat)


def test_the_narrow_fault_misses_what_the_model_catches():
    # why the model exists: the fallback-only fault lets aten's strided copy run
    x = grid(4, 6)  # (the model faults it: test_every_caller_meets_the_fault)
    with emulation.xpu_fallback_failure(DEVICE_TYPE):
        assert torch.equal(x.t().contiguous(), x.t())


def test_a_copy_on_another_device_type_is_not_faulted():
    # (is_flat_loop and aten_reaches_kernel: the rule tests above)
    assert not faults.fault_applies(grid(4, 6), grid(6, 4).t(), "xla")


if MODE == "cuda":

    def test_cross_device_copies_fault_on_the_device_side():
        # aten stages a non-contiguous host<->device copy through the device
        host = torch.arange(24.0).reshape(4, 6)
        with model():
            assert torch.equal(host.to(DEV).cpu(), host)  # contiguous: a memcpy
            # a dense view (a transpose) comes back with its strides, as one memcpy;
            # a non-dense one is made contiguous on the device first
            assert torch.equal(host.to(DEV).t().cpu(), host.t())
            assert_faults(lambda: host.to(DEV)[:, ::2].cpu())  # .contiguous() on device
            dst = torch.zeros(6, 4, device=DEV)
            assert_faults(lambda: dst.t().copy_(host))  # dst.copy_(staging) on device
            with flag_gems.use_gems(include=["copy_"]):
                back = host.to(DEV)[:, ::2].cpu()  # FlagGems takes the device copy
        assert torch.equal(back, host[:, ::2])
