"""What KunlunXIN copy_ hands to aten, and why: dtypes Triton lacks there, complex,
quantized, sparse, cross-device and meta copies; torch's warnings and errors kept."""

import warnings

import guard_helpers as gh
import pytest
import torch

import flag_gems

pytestmark = pytest.mark.harness


@pytest.mark.copy_
def test_copy_direct_call_defaults_to_a_blocking_copy(monkeypatch):
    # torch's copy_ blocks unless asked not to, and so does a direct call's fallback
    seen = []
    copy_ = torch.ops.aten.copy_.default
    redispatch = copy_.redispatch
    spy = lambda *args: seen.append(args[-1]) or redispatch(*args)
    monkeypatch.setattr(copy_, "redispatch", spy)
    src = torch.randn(3, 4, dtype=torch.complex64, device=gh.DEVICE)  # a fallback dtype

    dst = lambda: torch.zeros(3, 4, dtype=torch.complex64, device=gh.DEVICE)

    gh.copy_module().copy_(dst(), src)
    gh.copy_module().copy_(dst(), src, True)
    gh.copy_module().copy(dst(), src)  # functional copy
    gh.copy_module().copy(dst(), src, non_blocking=True)
    assert seen == [False, True, False, True]


@pytest.mark.copy_
def test_copy_complex_to_real_keeps_warning():
    src = torch.randn(4, 6, dtype=torch.complex64)
    dst = torch.zeros(4, 6, device=gh.DEVICE)
    torch.set_warn_always(True)
    try:
        with gh.track_paths() as paths, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gh.gems_copy_(dst, src.to(gh.DEVICE))
    finally:
        torch.set_warn_always(False)
    assert paths.fallbacks == 1 and paths.launches == []
    assert any("discards the imaginary part" in str(w.message) for w in caught)
    gh.assert_bit_exact(dst, src.real.contiguous(), "complex->real")


@pytest.mark.copy_
def test_copy_fallback_dtypes():
    # float64 is disabled by the KunlunXIN descriptor; float8 and complex have no
    # Triton type there
    fp64 = flag_gems.runtime.device.support_fp64
    cases = [
        (torch.float64, torch.float64, not fp64),
        (torch.float32, torch.float64, not fp64),
        (torch.float8_e4m3fn, torch.float32, True),
        (torch.float32, torch.float8_e5m2, True),
        (torch.complex64, torch.complex64, True),
    ]
    if hasattr(torch, "float8_e8m0fnu"):
        cases.append((torch.float8_e8m0fnu, torch.float32, True))
    for src_dtype, dst_dtype, falls_back in cases:
        src = (torch.rand(3, 5) * 8).to(src_dtype)
        dst = torch.zeros(3, 5, dtype=dst_dtype, device=gh.DEVICE)
        with gh.track_paths() as paths:
            gh.gems_copy_(dst, src.to(gh.DEVICE))
        what = f"{src_dtype}->{dst_dtype}"
        assert (paths.fallbacks, len(paths.launches)) == (
            (1, 0) if falls_back else (0, 1)
        ), what
        gh.assert_bit_exact(dst, src.to(dst_dtype), what)


@pytest.mark.copy_
def test_copy_fallback_reasons_name_the_cause():
    # the debug line of every fallback says why, so a slow path can be traced
    reason = gh.strided_module().fallback_reason

    def t(dtype=torch.float32, device=gh.DEVICE):
        return torch.zeros(2, 3, dtype=dtype, device=device)

    x = t()
    assert reason(x, t()) is None
    assert reason(x, torch._neg_view(t())) is None  # negation runs in Triton
    assert reason(torch._neg_view(x), t()) is None
    for dtype in gh.INT_DTYPES + gh.FLOAT_DTYPES:
        assert reason(t(dtype), t(torch.bool)) is None
        assert reason(t(torch.bool), t(dtype)) is None
    if not flag_gems.runtime.device.support_fp64:
        assert reason(x, t(torch.float64)) == "dtype torch.float64 -> torch.float32"
        assert reason(t(torch.float64), x) == "dtype torch.float32 -> torch.float64"
    assert reason(x, t(torch.complex64)) == "dtype torch.complex64 -> torch.float32"
    f8 = t(torch.float8_e4m3fn)
    assert reason(f8, x) == "dtype torch.float32 -> torch.float8_e4m3fn"
    # torch negates into bool after the copy and raises there
    neg_bool = "negation into bool (aten raises for it)"
    b = t(torch.bool)
    assert reason(b, torch._neg_view(x)) == neg_bool
    assert reason(b, torch._neg_view(t(torch.bool))) == neg_bool
    assert reason(torch._neg_view(b), t(torch.bool)) == neg_bool
    assert reason(torch._neg_view(b), torch._neg_view(t(torch.bool))) is None
    assert reason(x, t(device="meta")) == "cross-device or meta copy"
    assert reason(t(device="meta"), t(device="meta")) == "cross-device or meta copy"
    q = torch.quantize_per_tensor(torch.zeros(2, 3), 0.1, 0, torch.qint8)
    assert reason(q, q) == "quantized tensor"
    assert reason(q, torch.zeros(2, 3)) == "quantized tensor"  # quantizing copy
    assert reason(torch.zeros(2, 3), q) == "quantized tensor"


@pytest.mark.copy_
def test_copy_quantized_goes_to_fallback():
    q = torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8)
    dst_q = torch.quantize_per_tensor(torch.zeros(4), 0.1, 0, torch.qint8)
    with gh.track_paths() as paths:
        gh.copy_module().copy_(dst_q, q)
    assert paths.fallbacks == 1 and paths.launches == []
    assert torch.equal(dst_q.int_repr(), q.int_repr())


@pytest.mark.copy_
@pytest.mark.parametrize("direct", [False, True])
@pytest.mark.parametrize("sparse_side", ["src", "dst"])
def test_copy_sparse_with_dense_gets_torchs_error(sparse_side, direct):
    # Tensor.copy_ picks the layout's kernel itself (copy_ is never reached); a
    # direct call is dispatched again, to that kernel: torch's error (before,
    # _is_alias_of and the dense redispatch raised 'Cannot access storage of
    # SparseTensorImpl'), nothing written, no Triton launch, no dense fallback
    def make(device):
        dense, sparse = torch.zeros(3, 3, device=device), torch.eye(3).to_sparse()
        sparse = sparse.to(device)
        return (dense, sparse) if sparse_side == "src" else (sparse, dense)

    # torch's own error on the device (its text names the device's tensor types)
    expected = gh.torch_error(lambda: make(gh.DEVICE)[0].copy_(make(gh.DEVICE)[1]))
    dst, src = make(gh.DEVICE)
    with gh.track_paths() as paths, pytest.raises(expected[0]) as err:
        (gh.copy_module().copy_ if direct else gh.gems_copy_)(dst, src)
    assert str(err.value) == expected[1]
    assert paths.launches == [] and paths.fallbacks == 0
    assert torch.equal(dst.to_dense().cpu(), make("cpu")[0].to_dense())


@pytest.mark.copy_
def test_copy_sparse_into_sparse():
    # through dispatch, and by a direct call as other ops make it: the sparse kernel,
    # which copies its dense indices and values with copy_ (those reach the op as
    # plain dense copies)
    for copy_ in (gh.gems_copy_, gh.copy_module().copy_):
        dst = torch.zeros(3, 3).to_sparse().to(gh.DEVICE)
        with gh.track_paths() as paths:
            assert copy_(dst, (torch.eye(3) * 2).to_sparse().to(gh.DEVICE)) is dst
        assert torch.equal(dst.to_dense().cpu(), torch.eye(3) * 2)
        assert paths.fallbacks == 0


@pytest.mark.copy_
def test_copy_cross_device_goes_to_fallback():
    src = torch.empty(3, 4, device="meta")
    expected = gh.torch_error(lambda: torch.zeros(3, 4).copy_(src))
    dst = torch.zeros(3, 4, device=gh.DEVICE)
    with gh.track_paths() as paths, pytest.raises(expected[0]) as err:
        gh.copy_module().copy_(dst, src)
    assert str(err.value) == expected[1]
    assert paths.fallbacks == 1 and paths.launches == []
    meta = torch.empty(3, 4, device="meta")  # into meta: nothing to do, as torch
    with gh.track_paths() as paths:
        assert gh.copy_module().copy_(meta, torch.ones(3, 4, device=gh.DEVICE)) is meta
    assert paths.fallbacks == 1 and paths.launches == []
    if gh.DEVICE != "cpu":  # host -> device, contiguous: the runtime's memcpy
        cpu_src = torch.randn(3, 4)
        with gh.track_paths() as paths:
            gh.copy_module().copy_(dst, cpu_src)
        assert paths.fallbacks == 1
        gh.assert_bit_exact(dst, cpu_src, "host to device")
