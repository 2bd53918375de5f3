"""KunlunXIN copy_ on values: conversion edge values of every dtype pair, negated
views and the negation kernel, Python numbers (direct call and through dispatch)."""

import warnings

import guard_helpers as gh
import pytest
import torch

from tests.test_copy_ops import _pair_id, _same

pytestmark = pytest.mark.harness


SIGN = {2: -(2**15), 4: -(2**31), 8: -(2**63)}  # the sign bit, as a signed integer

# Integers where a float format rounds: bfloat16 (8 significant bits) and float16
# (11) ties, float32's 2**24 limit, and integers whose float32 rounding lands on a
# bfloat16 tie (torch rounds int -> float32 -> bfloat16: a single rounding differs).
_EDGE_INTEGERS = [0, 1, -1, 2, 127, 128, 255, 256, 257, 259, 383, 385, 2047, 2049]
_EDGE_INTEGERS += [2051, 4097, 32767, 65504, 65519, 65520, 65535, 2**24 - 1, 2**24]
_EDGE_INTEGERS += [2**24 + 1, 2**24 + 3, 0x1008001, 0x1010001, 0x7FFFFF80, 0x7FFFFFC0]
_EDGE_INTEGERS += [2**31 + 2**7, 2**40 + 2**32 + 1, 2**53 + 1, 2**60 + 2**36 + 1]
_EDGE_INTEGERS += [2**62 + 2**54 + 1, 0x0123456789ABCDEF]


def _float_edges():
    """float64 values around every float format's edges (all exact in float64)."""
    values = [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1.0, -1.0]
    for dtype in gh.FLOAT_DTYPES:
        info = torch.finfo(dtype)
        tiny_sub = info.smallest_normal * info.eps  # smallest subnormal
        ulp_max = info.max * info.eps / (2 - info.eps)  # spacing below max
        for v in (
            tiny_sub,  # subnormals
            tiny_sub / 2,  # tie to zero
            tiny_sub * 1.5,  # tie to even (2 * smallest)
            tiny_sub * 3,
            info.smallest_normal - tiny_sub,  # largest subnormal
            info.smallest_normal,
            info.max,
            info.max + ulp_max / 2,  # overflow threshold: a tie, rounds to inf
            info.max + ulp_max / 4,
            1 + info.eps / 2,  # ties at 1: to even (down), ...
            1 + 3 * info.eps / 2,  # ... to even (up)
        ):
            values += [v, -v]
    # float -> integer: truncation toward zero, and each integer type's limits
    values += [0.5, -0.5, 1.5, -1.5, 2.75, -2.75, 300.5, 2.0**24 + 2]
    for dtype in gh.INT_DTYPES:
        info = torch.iinfo(dtype)
        values += [info.min - 1.0, info.min - 0.5, float(info.min), info.max + 0.5]
        values += [info.max + 1.0, float(info.max)]
    return values


# NaNs whose payload is one low bit (quiet bit clear): still NaN after any conversion,
# though a rounding done on the bit pattern would carry them into inf.
_LOW_PAYLOAD_NANS = {
    torch.float32: (torch.int32, [0x7F800001, -0x007FFFFF]),
    torch.float16: (torch.int16, [0x7C01, -0x03FF]),
    torch.bfloat16: (torch.int16, [0x7F81, -0x007F]),
}


def edge_values(dtype):
    """Edge values of `dtype` (CPU): its own extremes and the others' edges."""
    if dtype is torch.bool:
        return torch.tensor([False, True])
    if dtype.is_floating_point:
        x = torch.tensor(_float_edges(), dtype=torch.float64)
        x32 = x.float()  # each edge, and its float32 neighbours
        near = [x32, torch.nextafter(x32, x32.new_tensor(float("inf")))]
        near.append(torch.nextafter(x32, x32.new_tensor(float("-inf"))))
        bits, patterns = _LOW_PAYLOAD_NANS[dtype]
        nans = torch.tensor(patterns, dtype=bits).view(dtype)
        return torch.cat([x.to(dtype)] + [t.to(dtype) for t in near] + [nans])
    info = torch.iinfo(dtype)
    ints = [info.min, info.min + 1, info.max - 1, info.max]
    ints += [v for e in _EDGE_INTEGERS for v in (e, -e) if info.min <= v <= info.max]
    return torch.tensor(ints, dtype=torch.int64).to(dtype)


ALL_PAIRS = [(s, d) for s in gh.TRITON_DTYPES for d in gh.TRITON_DTYPES]


@pytest.mark.copy_
@pytest.mark.parametrize("pair", ALL_PAIRS, ids=_pair_id)
def test_copy_conversion_edge_values(pair):
    src_dtype, dst_dtype = pair
    values = edge_values(src_dtype)
    values = values[gh.c_defined(values, dst_dtype)]
    n = values.numel()
    fill = torch.ones(n, dtype=dst_dtype)  # what the copy must not touch
    layouts = {
        # name: (src base, src view, dst base, dst view)
        "contiguous": (values, _same, fill, _same),
        "strided_src": (values[:, None].repeat(1, 3), lambda t: t[:, 1], fill, _same),
        "strided_dst": (values, _same, fill[:, None].repeat(1, 2), lambda t: t[:, 0]),
    }
    for layout, bases in layouts.items():
        gh.Case(bases, src_dtype, dst_dtype, name=layout).copy_and_check()


@pytest.mark.copy_
@pytest.mark.parametrize("value", [[1, 2, 3], None, "3"], ids=repr)
def test_copy_direct_call_rejects_what_is_not_a_number(value):
    # torch's Tensor.copy_ takes a tensor or a number; anything else is a TypeError,
    # raised before anything is written
    dst = torch.full((2, 3), 7.0, device=gh.DEVICE)
    with gh.track_paths() as paths, pytest.raises(TypeError, match="must be Tensor"):
        gh.copy_module().copy_(dst, value)
    assert paths.launches == [] and paths.fallbacks == 0
    assert bool((dst.cpu() == 7.0).all())


def _number_launches(dst, value, dispatched=False):
    """(fallbacks, launches) of copy_(dst, number).

    The number is converted on the host from float64/int64/bool into dst's dtype
    and copied as a 0-d source (a complex one, or into a dtype Triton lacks: aten).
    Under use_gems that conversion is itself a dispatched copy_ in cpu mode (the
    host is the device), and the transfer to the device one elsewhere.
    """
    triton_dtypes = gh.strided_module()._TRITON_DTYPES
    host = torch.tensor(value, dtype=torch.float64 if type(value) is float else None)
    if host.is_complex() or dst.dtype not in triton_dtypes:
        if dispatched and gh.DEVICE != "cpu":
            # aten's host->device copy, dispatched again: the host value into a
            # contiguous buffer on the device (cross-device), and that buffer into a
            # non-contiguous dst (a dtype Triton lacks); both fall back
            return 2 + (not dst.is_contiguous()), []
        return 1, []
    fallbacks, launches = 0, []
    if dispatched and gh.DEVICE == "cpu" and host.dtype != dst.dtype:
        if host.dtype in triton_dtypes:
            launches += gh.expected_launches(torch.empty((), dtype=dst.dtype), host)
        else:
            fallbacks += 1
    elif dispatched and gh.DEVICE != "cpu":
        fallbacks += 1
    launches += gh.expected_launches(dst, torch.empty((), dtype=dst.dtype))
    return fallbacks, launches


# Numbers (Tensor.copy_ or a direct call): torch wraps a float as a float64 tensor, an int as
# int64, a bool as bool, so a count like 2**24 + 1 or a tiny flag like 1e-50
# survives. A Python kernel is handed the number itself, not the wrapped tensor.
SCALAR_CASES = [
    (value, dtype)
    for dtype in (torch.float32, torch.bfloat16, torch.int32, torch.bool)
    for value in (3.7, -2, True, 1e10, 2.0**-140, 1.00390625)
    if not (dtype is torch.int32 and value == 1e10)  # overflow: undefined in C++
] + [
    (2.0**24 + 1, torch.int32),
    (-(2.0**40) - 1, torch.int64),
    (1e-50, torch.bool),
    (1e-40, torch.float32),
    (2**53 + 1, torch.int64),
    (-(2**62) - 1, torch.int64),
    (3.7, torch.float64),  # (aten: float64 is not Triton's on KunlunXIN)
    (2**53 + 1, torch.float64),
    (1j, torch.float32),  # complex: aten, which warns
]


@pytest.mark.copy_
@pytest.mark.parametrize("value, dtype", SCALAR_CASES, ids=lambda x: str(x))
def test_copy_python_number(value, dtype):
    # through dispatch, and by a direct call as other ops make it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # complex -> real: torch warns
        ref = torch.zeros(3, 4, dtype=dtype).copy_(value)
        for dispatched in (False, True):
            dst = torch.zeros(4, 6, dtype=dtype, device=gh.DEVICE)[:, ::2].t()
            with gh.track_paths() as paths:
                if dispatched:
                    gh.gems_copy_(dst, value)
                else:
                    assert gh.copy_module().copy_(dst, value) is dst
            expected = _number_launches(dst, value, dispatched)
            assert (paths.fallbacks, paths.launches) == expected, dispatched
            gh.assert_bit_exact(dst, ref, f"{value!r} -> {dtype} ({dispatched=})")


NEG_CASES = gh.cases(
    "transpose:fp32->fp32 contiguous:fp16->fp16 transpose:bf16->bf16"
    " dst_transposed:i8->i8 transpose:i32->i32 contiguous:i64->i64 transpose:u8->u8"
    " transpose:fp32->bf16 sdpa_mask:bf16->fp32 transpose:fp32->i32"
    " contiguous:bf16->u8 transpose:i8->i64 transpose:i64->bf16"
    " expand_row:i32->fp32 transpose:bool->fp32 transpose:bool->bool"
)
# negation into bool raises in torch: test_copy_negation_into_bool
NEG_PARAMS = [
    (*c, neg)
    for c in NEG_CASES
    for neg in ("src", "dst", "both")
    if c[2] is not torch.bool or neg == "both"
]


@pytest.mark.copy_
@pytest.mark.parametrize(
    "layout, src_dtype, dst_dtype, neg",
    NEG_PARAMS,
    ids=[f"{c[0]}-{_pair_id(c[1:3])}-{c[3]}" for c in NEG_PARAMS],
)
def test_copy_negated_views(layout, src_dtype, dst_dtype, neg):
    # torch copies the stored values (converted), then negates dst in its dtype
    # where the two negation bits differ; both negated: a plain copy
    case = gh.Case(layout, src_dtype, dst_dtype, seed=7, neg=neg)
    assert case.src.is_neg() == (neg != "dst") and case.dst.is_neg() == (neg != "src")
    case.copy_and_check()  # NaNs by position where negated (torch's bf16 neg rewrites them)


@pytest.mark.copy_
@pytest.mark.parametrize(
    "views",
    ["float_src_neg", "bool_src_neg", "bool_dst_neg", "int_into_bool_dst_neg"],
)
def test_copy_negation_into_bool(views):
    # torch negates bool after the copy and raises there ("neg_cpu" not implemented
    # for 'Bool'), having written the copy: the fallback does exactly that
    def make(device):
        base = torch.zeros(3, 2, dtype=torch.bool, device=device)
        src = torch.tensor([[1.0, 0.0, -2.5], [0.0, 3.0, 0.5]], device=device)
        neg = torch._neg_view
        src = {
            "float_src_neg": neg(src),
            "bool_src_neg": neg(src != 0),
            "bool_dst_neg": src != 0,
            "int_into_bool_dst_neg": src.to(torch.int32),
        }[views]
        return neg(base) if views.endswith("dst_neg") else base, src.t(), base

    # torch's error names the device's kernel ("neg_cpu", "neg_cuda"): the reference
    # is aten on the test's device (harness tests run without the device model);
    # the buffer holds what torch wrote before raising
    gh.assert_torch_error(make, fallbacks=1, ref_device=gh.DEVICE, untouched=False)


def _sign_flipped(x):
    """x with every float's sign bit flipped (bit for bit, NaN payloads kept)."""
    bits = gh.BITS[x.element_size()]
    return (x.view(bits) ^ SIGN[x.element_size()]).view(x.dtype)


@pytest.mark.copy_
@pytest.mark.parametrize(
    "dtype", gh.FLOAT_DTYPES + [torch.float64] + gh.INT_DTYPES, ids=gh.SHORT.get
)
def test_negate_kernel(dtype):
    # as torch's neg: for floats the sign bit flipped (neg of 0.0 is -0.0, of a NaN
    # a NaN of the other sign; Triton's -x, 0 - x, would give +0.0 for 0.0); float64
    # too: its branch serves backends that enable it (KunlunXIN's copy_ sends
    # float64 to aten). Integers wrap: two's complement, -min == min, uint8 mod 256
    if dtype.is_floating_point:
        x = edge_values(dtype if dtype in _LOW_PAYLOAD_NANS else torch.float32)
        nan = torch.tensor([float("nan")])
        x = torch.cat([x, nan, _sign_flipped(nan)]).to(dtype)
        assert {0.0} == set(x[x == 0].tolist()) and torch.signbit(
            x[x == 0]
        ).unique().numel() == 2
        ref = _sign_flipped(x)
    else:
        x = edge_values(dtype)
        ref = torch.neg(x)
    with gh.track_paths() as paths:
        out = gh.strided_module()._negate_kernel(x.to(gh.DEVICE))
    assert paths.launches == [("_negate_kernel", 1)]
    gh.assert_bit_exact(out, ref, f"_negate_kernel({gh.SHORT[dtype]})")


@pytest.mark.copy_
@pytest.mark.parametrize("dtype", gh.FLOAT_DTYPES, ids=gh.SHORT.get)
def test_copy_negated_zero_and_nan_signs(dtype):
    # a negated view of +-0.0 and +-NaN copies as -+0.0 and -+NaN: the sign bit is
    # flipped, as torch's neg does for float32 and float16 (for bfloat16 torch's
    # CPU neg returns its quiet NaN 0x7FC0 whatever the sign: NaN-ness compared)
    nan = torch.tensor([float("nan")], dtype=dtype)
    # (-nan would be torch's bfloat16 neg: a positive NaN)
    values = torch.tensor([0.0, -0.0, 1.0], dtype=dtype)
    values = torch.cat([values, nan, _sign_flipped(nan)])
    expected_signs = [True, False, True, True, False]
    ref = torch.zeros(5, dtype=dtype)
    ref.copy_(torch._neg_view(values))
    if dtype is not torch.bfloat16:
        assert torch.signbit(ref).tolist() == expected_signs  # torch's own result
    for which in ("src", "dst"):
        dst, src = torch.zeros(5, dtype=dtype, device=gh.DEVICE), values.to(gh.DEVICE)
        # (into a negated view: its stored values are the negation)
        neg = torch._neg_view
        with gh.track_paths() as paths:
            gh.gems_copy_(*((dst, neg(src)) if which == "src" else (neg(dst), src)))
        assert paths.fallbacks == 0 and paths.launches[-1] == ("_negate_kernel", 1)
        assert torch.signbit(gh.host_view(dst)).tolist() == expected_signs, which
        gh.assert_bit_exact(dst, ref, f"signs {gh.SHORT[dtype]}", exact_nans=False)
