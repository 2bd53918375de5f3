# Copyright 2026 FlagOS Contributors
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

# KunlunXIN copy_ with strided sources and destinations. References are computed
# by torch on the host; tensors reach the device only as contiguous buffers,
# because torch's own strided copy is the kernel the XPU lacks: a copy_ that
# reached it fails with "invalid device function" by itself.

import pytest
import torch

import flag_gems

from . import accuracy_utils as utils

pytestmark = pytest.mark.skipif(
    flag_gems.vendor_name != "kunlunxin", reason="tests the KunlunXIN copy_"
)

DEVICE = flag_gems.device


def _same(t):
    return t


# name: (src base shape, src view, dst base shape, dst view)
LAYOUTS = {
    "contiguous": ((16, 33), _same, (16, 33), _same),
    "expand_row": ((33,), lambda s: s.expand(8, 33), (8, 33), _same),
    "sdpa_mask": (
        (2, 1, 1, 16),
        lambda s: s.expand(2, 4, 16, 16),
        (2, 4, 16, 16),
        _same,
    ),
    "broadcast": ((33,), _same, (8, 33), _same),
    "scalar_0d": ((), _same, (5, 7), _same),
    "transpose": ((33, 16), lambda s: s.t(), (16, 33), _same),
    "step_slice": ((40, 60), lambda s: s[::2, 1::3], (20, 20), _same),
    "permute4d": (
        (3, 4, 5, 6),
        lambda s: s.permute(2, 0, 3, 1),
        (5, 3, 6, 4),
        _same,
    ),
    "composite": (
        (10, 12, 14),
        lambda s: s.permute(2, 0, 1)[1:, ::2, 3:9].unsqueeze(1).expand(13, 3, 5, 6),
        (13, 3, 5, 6),
        _same,
    ),
    "strided_dst": ((16, 33), _same, (33, 16), lambda d: d.t()),
    "both_transposed": ((33, 16), lambda s: s.t(), (33, 16), lambda d: d.t()),
    "dst_step_slice": ((10, 10), _same, (20, 30), lambda d: d[::2, 1::3][:, :10]),
}
QUICK_LAYOUTS = ["expand_row", "transpose", "strided_dst"]

SAME_DTYPES = [
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.int8,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
]
CAST_PAIRS = [
    (torch.float32, torch.bfloat16),
    (torch.float32, torch.float16),
    (torch.float16, torch.float32),
    (torch.float32, torch.int32),
    (torch.int32, torch.float32),
    (torch.float32, torch.bool),
    (torch.int16, torch.bool),
    (torch.int32, torch.bfloat16),
    (torch.float32, torch.uint8),
    (torch.int64, torch.int8),
]
SHORT = {
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.float32: "fp32",
    torch.int8: "i8",
    torch.int16: "i16",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.uint8: "u8",
    torch.bool: "bool",
}
BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _pair_id(pair):
    return f"{SHORT[pair[0]]}->{SHORT[pair[1]]}"


def _host_values(shape, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    if dtype is torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=gen) * 100).to(dtype)
    info = torch.iinfo(dtype)
    low, high = max(info.min, -(2**20)), min(info.max, 2**20)
    return torch.randint(low, high, shape, generator=gen, dtype=torch.int64).to(dtype)


def _bits(t):
    # compare bit for bit: +-0.0 and NaN payloads count
    if t.dtype.is_floating_point or t.dtype is torch.bool:
        return t.view(BITS[t.element_size()])
    return t


def _assert_bits_equal(res, host_ref):
    if res.dtype.is_floating_point:
        # IEEE 754 leaves a converted NaN's sign and payload to the implementation
        # (torch gives fp16 0x7E00, Triton 0x7FFF): NaNs match by position
        _assert_bits_equal(torch.isnan(res), torch.isnan(host_ref))
        res = torch.where(torch.isnan(res), torch.zeros_like(res), res)
        host_ref = torch.where(
            torch.isnan(host_ref), torch.zeros_like(host_ref), host_ref
        )
    ref = utils.to_reference(_bits(host_ref).to(DEVICE))
    utils.gems_assert_equal(_bits(res), ref)


def _run_layout(layout, src_dtype, dst_dtype, seed=0):
    src_shape, src_view, dst_shape, dst_view = LAYOUTS[layout]
    host_src = _host_values(src_shape, src_dtype, seed)
    host_dst = _host_values(dst_shape, dst_dtype, seed + 1)
    src_base = host_src.to(DEVICE)
    dst_base = host_dst.to(DEVICE)
    dst_view(host_dst).copy_(src_view(host_src))
    with flag_gems.use_gems(include=["copy_"]):
        dst_view(dst_base).copy_(src_view(src_base))
    _assert_bits_equal(dst_base, host_dst)


@pytest.mark.copy_
@pytest.mark.parametrize("layout", QUICK_LAYOUTS if utils.QUICK_MODE else list(LAYOUTS))
@pytest.mark.parametrize("dtype", SAME_DTYPES, ids=SHORT.get)
def test_copy_strided_layouts(layout, dtype):
    _run_layout(layout, dtype, dtype)


@pytest.mark.copy_
@pytest.mark.parametrize("layout", ["expand_row", "transpose", "strided_dst"])
@pytest.mark.parametrize("pair", CAST_PAIRS, ids=_pair_id)
def test_copy_strided_layouts_with_conversion(layout, pair):
    _run_layout(layout, *pair)


# Values where torch's conversions differ from a plain Triton store: bool is
# `!= 0`, integers reach bfloat16 through float32 (two roundings), floats reach
# uint8 through int64; plus ties, overflow, +-0, +-inf, NaN and subnormals.
EDGE_VALUES = {
    torch.float32: [
        0.5,
        -0.25,
        0.0,
        -0.0,
        2.0,
        1.5,
        2.5,
        -1.5,
        -3.0,
        255.9,
        256.0,
        -129.0,
        65504.0,
        65520.0,
        1e-45,
        1e-40,
        float("inf"),
        float("-inf"),
        float("nan"),
        3.4e38,
        16777217.0,
    ],  # fmt: skip
    torch.int16: [256, 0, -256, 1, -1, 32767, -32768, 128, -129],
    torch.int32: [16842753, 16777217, 16777219, -16842753, 2**31 - 1, -(2**31), 0, 7],
    torch.int64: [2**40 + 1, -(2**63), 2**63 - 1, 300, -300, 255, 0],
}
# every cast pair from a dtype with edge values, and two that only the edges need
EDGE_PAIRS = [pair for pair in CAST_PAIRS if pair[0] in EDGE_VALUES] + [
    (torch.int64, torch.bfloat16),
    (torch.int32, torch.float16),
]


def _finite_for_int(values, dst_dtype):
    # float -> int of NaN, inf or an out-of-range value is undefined in C++:
    # torch's result differs between CPU and devices, so it is not compared
    if dst_dtype.is_floating_point or dst_dtype is torch.bool:
        return values
    return [v for v in values if v == v and abs(v) < 2**31]


@pytest.mark.copy_
@pytest.mark.parametrize("pair", EDGE_PAIRS, ids=_pair_id)
def test_copy_conversion_edge_values(pair):
    src_dtype, dst_dtype = pair
    values = EDGE_VALUES[src_dtype]
    if src_dtype.is_floating_point:
        values = _finite_for_int(values, dst_dtype)
    host_src = torch.tensor(values, dtype=src_dtype)
    host_src = torch.stack([host_src, host_src.flip(0)])  # (2, n): .t() is strided
    host_dst = torch.zeros(host_src.shape[::-1], dtype=dst_dtype)
    host_dst.copy_(host_src.t())
    src = host_src.to(DEVICE)
    dst = torch.zeros(host_dst.shape, dtype=dst_dtype, device=DEVICE)
    with flag_gems.use_gems(include=["copy_"]):
        dst.copy_(src.t())
    _assert_bits_equal(dst, host_dst)


@pytest.mark.copy_
@pytest.mark.parametrize("rank", [1, 3, 5, 6, 8])
def test_copy_high_rank_permuted(rank):
    shape = [2, 3, 1, 2, 3, 2, 1, 2][:rank]
    perm = list(reversed(range(rank)))
    host_src = _host_values(shape, torch.float32)
    host_dst = torch.zeros([shape[p] for p in perm], dtype=torch.float32)
    host_dst.copy_(host_src.permute(perm))
    src = host_src.to(DEVICE)
    dst = torch.zeros(host_dst.shape, dtype=torch.float32, device=DEVICE)
    with flag_gems.use_gems(include=["copy_"]):
        dst.copy_(src.permute(perm))
    _assert_bits_equal(dst, host_dst)


@pytest.mark.copy_
@pytest.mark.parametrize("which", ["src", "dst", "both"])
@pytest.mark.parametrize(
    "pair",
    [
        (torch.float32, torch.float32),
        (torch.int8, torch.int32),
        (torch.int32, torch.int8),
    ],
    ids=_pair_id,
)
def test_copy_negated_views(which, pair):
    # a lazily negated view (e.g. the imaginary part of a conjugate) is negated
    # in the kernel, in dst's dtype after the conversion, as torch does
    src_dtype, dst_dtype = pair
    if src_dtype.is_floating_point:
        host_src = torch.tensor([[0.0, -0.0, 1.5], [-2.0, float("nan"), 3.0]])
    else:
        host_src = torch.tensor([[-128, 127, 0], [1, -1, 100]], dtype=src_dtype)
    host_base = torch.zeros(3, 2, dtype=dst_dtype)

    def views(src, base):
        src = torch._neg_view(src) if which in ("src", "both") else src
        dst = torch._neg_view(base) if which in ("dst", "both") else base
        return dst, src.t()

    dst, src = views(host_src, host_base)
    dst.copy_(src)
    base = torch.zeros(3, 2, dtype=dst_dtype, device=DEVICE)
    dst, src = views(host_src.to(DEVICE), base)
    with flag_gems.use_gems(include=["copy_"]):
        dst.copy_(src)
    _assert_bits_equal(base, host_base)


@pytest.mark.copy
@pytest.mark.parametrize("layout", ["transpose", "expand_row", "strided_dst"])
def test_copy_functional(layout):
    src_shape, src_view, dst_shape, dst_view = LAYOUTS[layout]
    host_src = _host_values(src_shape, torch.float32)
    template = dst_view(torch.empty(dst_shape, device=DEVICE))
    # flag_gems.copy is called directly by other KunlunXIN ops (not dispatched)
    out = flag_gems.copy(template, src_view(host_src.to(DEVICE)))
    assert out.shape == template.shape and out.stride() == template.stride()
    ref = src_view(host_src).expand(out.shape)
    ref = torch.empty_strided(out.shape, out.stride()).copy_(ref)
    base = out.as_strided((out.numel(),), (1,))  # out is dense: compare its memory
    _assert_bits_equal(base, ref.as_strided((ref.numel(),), (1,)))


@pytest.mark.copy_
def test_copy_direct_call_with_sparse_source():
    # other ops call flag_gems.copy_ directly: a sparse source gets torch's error
    # (torch's error on the device: its text names the device's tensor types)
    host_sparse = torch.eye(3).to_sparse()
    kind, message = _torch_error(
        lambda: torch.zeros(3, 3, device=DEVICE).copy_(host_sparse.to(DEVICE))
    )
    dst = torch.zeros(3, 3, device=DEVICE)
    with pytest.raises(kind) as info:
        flag_gems.copy_(dst, host_sparse.to(DEVICE))
    assert str(info.value) == message
    _assert_bits_equal(dst, torch.zeros(3, 3))


def _torch_error(fn):
    try:
        fn()
    except Exception as exc:
        return type(exc), str(exc)
    raise AssertionError("torch accepted this copy")


def _assert_same_error_untouched(make_dst_src):
    """torch's exact error on the host; the same error on the device, dst untouched."""
    host_dst, host_src, host_base = make_dst_src("cpu")
    before = host_base.clone()
    kind, message = _torch_error(lambda: host_dst.copy_(host_src))
    dst, src, base = make_dst_src(DEVICE)
    with flag_gems.use_gems(include=["copy_"]):
        with pytest.raises(kind) as info:
            dst.copy_(src)
    assert str(info.value) == message
    _assert_bits_equal(base, before)


def _filled(shape, device):
    return torch.arange(float(torch.Size(shape).numel())).reshape(shape).to(device)


@pytest.mark.copy_
@pytest.mark.parametrize(
    "dst_shape, src_shape",
    [((3, 4), (5, 4)), ((4,), (2, 4)), ((2, 3, 4), (2, 1, 5)), ((0, 3), (2, 3))],
)
def test_copy_illegal_broadcast(dst_shape, src_shape):
    def make(device):
        base = _filled(dst_shape, device)
        src = _filled(src_shape[::-1], device).permute(*reversed(range(len(src_shape))))
        return base, src, base

    _assert_same_error_untouched(make)


@pytest.mark.copy_
@pytest.mark.parametrize("kind", ["internal", "partial", "partial_strided"])
def test_copy_overlap_errors(kind):
    def make(device):
        base = _filled((4, 8), device)
        if kind == "internal":  # a broadcast destination
            return base[0:1, :4].expand(3, 4), base[1:, :4].t().t(), base
        if kind == "partial":  # dense, overlapping, shifted
            return base.view(-1)[2:18], base.view(-1)[:16], base
        square = base.view(-1)[:16].view(4, 4)
        return square.t(), square, base  # the same bytes, other strides

    _assert_same_error_untouched(make)


@pytest.mark.copy_
@pytest.mark.parametrize(
    "views",
    [
        lambda b: (b[1::2], b[:-1:2]),
        lambda b: (b.view(8, 4)[:, :2].t(), b.view(8, 4)[1:3, 1:2].expand(2, 8)),
    ],
    ids=["interleaved", "expanded_alias"],
)
def test_copy_aliasing_views_read_before_write(views):
    # views that share memory in a way torch cannot classify (no error): every
    # element is read before any is written, whatever order the kernel runs in
    host = _filled((32,), "cpu")
    dst, src = views(host)
    dst.copy_(src.clone())
    base = _filled((32,), DEVICE)
    dst, src = views(base)
    with flag_gems.use_gems(include=["copy_"]):
        dst.copy_(src)
    _assert_bits_equal(base, host)


@pytest.mark.copy_
def test_copy_self_alias_is_noop():
    base = _filled((4, 6), DEVICE)
    view = base[:, 1::2]
    with flag_gems.use_gems(include=["copy_"]):
        assert view.copy_(view) is view
        view.copy_(base[:, 1::2])  # another view object, same memory
    _assert_bits_equal(base, _filled((4, 6), "cpu"))


@pytest.mark.copy_
def test_copy_empty_and_zero_dim():
    empty = torch.empty(0, 3, device=DEVICE)
    host_src = _host_values((), torch.float32)
    dst = torch.zeros((), device=DEVICE)
    with flag_gems.use_gems(include=["copy_"]):
        empty.copy_(torch.ones(3, device=DEVICE).expand(0, 3))
        dst.copy_(host_src.to(DEVICE))
    assert empty.shape == (0, 3)
    _assert_bits_equal(dst, host_src)


@pytest.mark.copy_
@pytest.mark.parametrize("dtype", [torch.complex64, torch.float64])
def test_copy_falls_back_for_dtypes_triton_lacks(dtype):
    # contiguous copies of these dtypes go to aten, whose flat copy runs on the XPU
    host_src = torch.randn(4, 5, dtype=dtype)
    dst = torch.zeros(4, 5, dtype=dtype, device=DEVICE)
    with flag_gems.use_gems(include=["copy_"]):
        dst.copy_(host_src.to(DEVICE))
    ref = utils.to_reference(host_src.to(DEVICE))
    utils.gems_assert_equal(dst, ref)


@pytest.mark.copy_
def test_copy_to_and_from_host():
    # cross-device copies go to aten (a contiguous one is a plain memcpy)
    host_src = _host_values((6, 7), torch.float32)
    dst = torch.zeros(6, 7, device=DEVICE)
    back = torch.zeros(6, 7)
    with flag_gems.use_gems(include=["copy_"]):
        dst.copy_(host_src)
        back.copy_(dst)
    _assert_bits_equal(back.to(DEVICE), host_src)


@pytest.mark.copy_
@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.float32])
def test_copy_sdpa_mask(mask_dtype):
    # a (B, 1, 1, S) padding mask expanded to (B, H, S, S), as attention takes it
    host_mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]]).to(mask_dtype)
    host_mask = host_mask[:, None, None, :]
    host_ref = torch.empty(2, 4, 4, 4, dtype=mask_dtype)
    host_ref.copy_(host_mask.expand(2, 4, 4, 4))
    mask = torch.empty(2, 4, 4, 4, dtype=mask_dtype, device=DEVICE)
    with flag_gems.use_gems(include=["copy_"]):
        mask.copy_(host_mask.to(DEVICE).expand(2, 4, 4, 4))
    _assert_bits_equal(mask, host_ref)


@pytest.mark.copy_
@pytest.mark.parametrize("value", [3.7, -2, True, 2.0**24 + 1], ids=repr)
@pytest.mark.parametrize(
    "dtype", [torch.bfloat16, torch.int32, torch.bool], ids=SHORT.get
)
def test_copy_python_number(value, dtype):
    # Tensor.copy_(3.7) fills; a Python kernel receives the number itself
    host_base = torch.zeros(3, 4, dtype=dtype)
    host_base.t().copy_(value)
    base = torch.zeros(3, 4, dtype=dtype, device=DEVICE)
    with flag_gems.use_gems(include=["copy_"]):
        base.t().copy_(value)
    _assert_bits_equal(base, host_base)
