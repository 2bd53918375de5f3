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

# Removed with the fast launch and coalescing (docs/COPY_REPORT.md records them): tests of _launches, _coalesce, _plan.

"""KunlunXIN copy_ / copy (harness tests): which path each copy takes, torch's semantics.

Overlay-only companion of the PR file tests/test_copy_ops.py: it counts the Triton
launches (kernel and rank) and aten fallbacks of every copy, pins internals with
mocks, and fuzzes. Every reference is computed by torch on the CPU from the same
values (torch_copy_ where a negation bit is involved), and tensors reach the device
only as contiguous buffers: on KunlunXIN torch's own strided copy is the kernel that
fails, so it cannot serve as the reference there.
"""

import contextlib
import os
import sys
import warnings
from unittest import mock

import hypothesis
import pytest
import torch

import flag_gems
from copyfix import tracking

pytestmark = pytest.mark.harness

DEVICE = flag_gems.device
COPY_MODULE = "_kunlunxin.ops.copy"


@pytest.fixture(autouse=True)
def small_copies_through_triton(request):
    """The Triton path for every copy here: the tensors are small, and the fork's
    copy.py hands small same-dtype contiguous copies to native (tested on its own in
    test_small_same_dtype_contiguous_copies_go_native, marked native_shortcut)."""
    if request.node.get_closest_marker("native_shortcut"):
        yield
        return
    with tracking.small_copies_through_triton(copy_module()):
        yield


FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32]
INT_DTYPES = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]
TRITON_DTYPES = FLOAT_DTYPES + INT_DTYPES + [torch.bool]
SHORT = {
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.float32: "fp32",
    torch.float64: "fp64",
    torch.int8: "i8",
    torch.int16: "i16",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.uint8: "u8",
    torch.bool: "bool",
}
DTYPE_PAIRS = [(d, d) for d in TRITON_DTYPES] + [
    (torch.float32, torch.bfloat16),
    (torch.float32, torch.float16),
    (torch.bfloat16, torch.float32),
    (torch.float16, torch.float32),
    (torch.bfloat16, torch.float16),
    (torch.float32, torch.int32),
    (torch.float16, torch.int8),
    (torch.bfloat16, torch.uint8),
    (torch.int32, torch.float32),
    (torch.int64, torch.bfloat16),
    (torch.uint8, torch.float16),
    (torch.int64, torch.int8),
    (torch.int8, torch.int64),
    (torch.bool, torch.float32),
    (torch.float32, torch.bool),
    (torch.int32, torch.bool),
]
BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
SIGN = {2: -(2**15), 4: -(2**31), 8: -(2**63)}  # the sign bit, as a signed integer


def _same(t):
    return t


# name: (src base shape, src view, dst base shape, dst view)
LAYOUTS = {
    "contiguous": ((64, 33), _same, (64, 33), _same),
    "expand_row": ((128,), lambda s: s.expand(4, 128), (4, 128), _same),
    "sdpa_mask": (
        (2, 1, 1, 16),
        lambda s: s.expand(2, 4, 16, 16),
        (2, 4, 16, 16),
        _same,
    ),
    "broadcast": ((33,), _same, (8, 33), _same),
    "scalar_0d": ((), _same, (5, 7), _same),
    "transpose": ((33, 64), lambda s: s.t(), (64, 33), _same),
    "both_transposed": ((33, 64), lambda s: s.t(), (33, 64), lambda d: d.t()),
    "step_slice": ((40, 60), lambda s: s[::2, 1::3], (20, 20), _same),
    "permute4d": ((3, 4, 5, 6), lambda s: s.permute(2, 0, 3, 1), (5, 3, 6, 4), _same),
    "transpose4d_inner": (
        (2, 3, 4, 5),
        lambda s: s.transpose(2, 3),
        (2, 3, 5, 4),
        _same,
    ),
    "composite": (
        (10, 12, 14),
        lambda s: s.permute(2, 0, 1)[1:, ::2, 3:9].unsqueeze(1).expand(13, 3, 5, 6),
        (13, 3, 5, 6),
        _same,
    ),
    "dst_transposed": ((33, 64), _same, (64, 33), lambda d: d.t()),
    "dst_step_slice": ((40, 16), lambda s: s.t(), (16, 80), lambda d: d[:, ::2]),
    "size1_dims": (
        (7, 9),
        lambda s: s.t().unsqueeze(0).unsqueeze(2),
        (1, 9, 1, 7),
        _same,
    ),
    "rank8": (
        (2, 3, 2, 3, 2, 3, 2, 3),
        lambda s: s.permute(7, 6, 5, 4, 3, 2, 1, 0),
        (3, 2, 3, 2, 3, 2, 3, 2),
        _same,
    ),
}


def copy_module():
    """The module flag_gems dispatches copy_ to (not a second import of it)."""
    return sys.modules[COPY_MODULE]


def strided_module():
    """The module holding the op's kernels and Triton path (the shared strided copy)."""
    return tracking.kernel_home(copy_module())


def c_defined(src, target):
    """Where converting `src` to `target` is defined (bool mask): THE exclusion rule.

    torch converts with C++ casts, so only what C leaves undefined is excluded: a float
    to integer (not bool) conversion of NaN, +-inf, or of a value whose truncation is
    outside the range of the integer type torch casts to (int64 for uint8: c10 casts
    float -> int64 -> uint8; the target otherwise). Nothing else is excluded.
    NaN results are compared by position only (assert_bit_exact with exact_nans=False
    across dtypes): IEEE 754 leaves a converted NaN's payload and sign to the
    implementation, and torch's own CPU paths disagree on it (bf16: torch gives
    0x7FC0, compiled Triton and this kernel 0x7FFF).
    """
    if not src.is_floating_point() or target.is_floating_point or target is torch.bool:
        return torch.ones(src.shape, dtype=torch.bool)
    info = torch.iinfo(torch.int64 if target is torch.uint8 else target)
    x = src.double().trunc()
    # (float64 holds every float input exactly; int64's bounds are +-2**63 there)
    return torch.isfinite(x) & (x >= info.min) & (x < info.max + 1.0)


def make_values(shape, dtype, target, gen):
    """Values of `dtype` whose conversion to `target` is defined in C++ and Triton."""
    if dtype is torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if dtype.is_floating_point:
        if target.is_floating_point:
            x = torch.randn(shape, generator=gen) * 100
            flat = x.view(-1)
            specials = [float("inf"), float("-inf"), float("nan"), -0.0, 1e-30, 3e38]
            for i, v in enumerate(specials[: flat.numel() // 8]):
                flat[i * 7 % flat.numel()] = v
        elif target is torch.bool:
            x = torch.randn(shape, generator=gen) * (
                torch.rand(shape, generator=gen) > 0.3
            )
        else:  # over the target's range, with fractions to truncate
            info = torch.iinfo(torch.int16 if target is torch.uint8 else target)
            x = torch.rand(shape, generator=gen, dtype=torch.float64)
            x = (info.min + x * (float(info.max) - info.min)).to(dtype)
            x = torch.where(c_defined(x, target), x, 0)  # C leaves the rest undefined
        return x.to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(
        info.min, info.max, shape, generator=gen, dtype=torch.int64
    ).to(dtype)


def expected_kernel(dst, src, snapshot=False):
    """The kernel copy_ must launch for dst <- src (src broadcast to dst's shape).

    A conversion where Triton's store differs from torch gets its own kernel; any
    other copy takes _copy_kernel when both sides are contiguous (a snapshot is),
    copy_slice otherwise.
    """
    s, d = src.dtype, dst.dtype
    if d is torch.bool and s is not torch.bool:
        return "_to_bool_kernel"
    if d is torch.bfloat16 and (
        s is torch.float16 or not (s.is_floating_point or s is torch.bool)
    ):
        return "_to_bf16_kernel"
    if d is torch.uint8 and s.is_floating_point:
        return "_float_to_uint8_kernel"
    dense = snapshot or src.expand(dst.shape).is_contiguous()
    return "_copy_kernel" if dst.is_contiguous() and dense else "copy_slice"


def expected_launches(dst, src, snapshot=False):
    """(kernel, rank) of every launch of a copy that runs in Triton, in order."""
    rank = dst.dim()
    launches = [("copy_slice", rank)] if snapshot else []
    if src.dtype is torch.int32 and dst.dtype is torch.float16:  # through float32
        launches.append(("copy_slice", rank))
        snapshot = True  # (the float32 tensor is contiguous)
        src = torch.empty(dst.shape, dtype=torch.float32)
    launches.append((expected_kernel(dst, src, snapshot), rank))
    if src.is_neg() != dst.is_neg():
        launches.append(("_negate_kernel", rank))
    return launches


class Case:
    """One copy: CPU originals for the reference, device buffers for flag_gems."""

    def __init__(self, layout, src_dtype, dst_dtype, seed=0, neg=""):
        src_shape, self.src_view, dst_shape, self.dst_view = LAYOUTS[layout]
        if neg in ("src", "both"):
            self.src_view = _negated(self.src_view)
        if neg in ("dst", "both"):
            self.dst_view = _negated(self.dst_view)
        gen = torch.Generator().manual_seed(seed)
        self.name = f"{layout}-{SHORT[src_dtype]}->{SHORT[dst_dtype]}"
        self.src_base = make_values(src_shape, src_dtype, dst_dtype, gen)
        self.dst_base = make_values(dst_shape, dst_dtype, dst_dtype, gen)
        self.dev_dst_base = self.dst_base.to(DEVICE, copy=True)
        self.src = self.src_view(self.src_base.to(DEVICE, copy=True))
        self.dst = self.dst_view(self.dev_dst_base)
        self.exact_nans = (
            src_dtype == dst_dtype and self.src.is_neg() == self.dst.is_neg()
        )

    def reference(self):
        ref = self.dst_base.clone()
        torch_copy_(self.dst_view(ref), self.src_view(self.src_base))
        return ref

    def check(self):
        assert_bit_exact(
            self.dev_dst_base, self.reference(), self.name, self.exact_nans
        )


def _negated(view):
    return lambda t: torch._neg_view(view(t))


def torch_copy_(dst, src):
    """torch's copy_ on the host, as its copy kernel defines it: the stored values
    converted, then dst negated in its dtype where the two negation bits differ.

    Spelled out because torch 2.13's CPU kernel drops the negation on its
    contiguous float32 <-> float16 path (torch.zeros(3, dtype=torch.float16)
    .copy_(torch._neg_view(torch.full((3,), 2.5))) gives 2.5; its strided and
    every other path give -2.5).
    """
    stored_dst = torch._neg_view(dst) if dst.is_neg() else dst
    stored_dst.copy_(torch._neg_view(src) if src.is_neg() else src)
    if dst.is_neg() != src.is_neg():
        stored_dst.neg_()
    return dst


def host_view(t):
    """`t` on the host, read through its storage: no device-side strided copy."""
    n = t.untyped_storage().nbytes() // t.element_size()
    flat = torch.empty(0, dtype=t.dtype, device=t.device)
    flat = flat.set_(t.untyped_storage(), 0, (n,), (1,)).cpu()
    return flat.as_strided(t.shape, t.stride(), t.storage_offset())


def assert_bit_exact(res, ref, what, exact_nans=True):
    """Bit-for-bit equality (a NaN's payload may differ only across dtypes)."""
    res = host_view(res)
    assert res.dtype == ref.dtype and res.shape == ref.shape, what
    if res.dtype.is_floating_point:
        bits = BITS[res.element_size()]
        diff = res.view(bits) != ref.view(bits)
        if not exact_nans:
            diff &= ~(torch.isnan(res) & torch.isnan(ref))
    else:
        diff = res != ref
    if diff.any():
        idx = tuple(int(i) for i in diff.nonzero()[0])
        raise AssertionError(
            f"{what}: {int(diff.sum())} of {diff.numel()} elements differ; "
            f"first at {idx}: got {res[idx].item()!r}, expected {ref[idx].item()!r}"
        )


KERNELS = tracking.OP_KERNELS


class Paths:
    def __init__(self):
        self.launches = []  # one (kernel name, rank) per Triton kernel launch
        self.fallbacks = 0  # aten copy_ redispatches

    @property
    def kernels(self):
        return [name for name, _ in self.launches]


@contextlib.contextmanager
def track_paths():
    """Count the Triton launches (kernel, rank) and aten fallbacks of copy_."""
    mod, paths = strided_module(), Paths()
    redispatch = torch.ops.aten.copy_.default.redispatch

    def counting(name, instantiate):
        def counting_instantiate(rank):
            paths.launches.append((name, rank))
            return instantiate(rank)

        return counting_instantiate

    def counting_redispatch(*args, **kwargs):
        paths.fallbacks += 1
        return redispatch(*args, **kwargs)

    with contextlib.ExitStack() as stack:
        for name in KERNELS:
            kernel = getattr(mod, name)
            stack.enter_context(
                mock.patch.object(
                    kernel, "instantiate", counting(name, kernel.instantiate)
                )
            )
        stack.enter_context(
            mock.patch.object(
                torch.ops.aten.copy_.default, "redispatch", counting_redispatch
            )
        )
        yield paths


def gems_copy_(dst, src):
    with flag_gems.use_gems(include=["copy_"]):
        return dst.copy_(src)


def torch_error(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - we compare whatever torch raises
        return type(exc), str(exc)
    raise AssertionError("torch accepted this copy")


def _pair_id(pair):
    return f"{SHORT[pair[0]]}->{SHORT[pair[1]]}"


# ---------------------------------------------------------------------------
# layout x dtype-pair matrix through torch dispatch (Tensor.copy_ under use_gems)
# ---------------------------------------------------------------------------


@pytest.mark.copy_
@pytest.mark.parametrize("pair", DTYPE_PAIRS, ids=_pair_id)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_copy_layout_dtype_matrix(layout, pair):
    case = Case(layout, *pair)
    with track_paths() as paths:
        out = gems_copy_(case.dst, case.src)
    assert out is case.dst
    assert paths.fallbacks == 0, f"{case.name} fell back to aten"
    expected = expected_launches(case.dst, case.src)
    assert paths.launches == expected, f"{case.name}: {paths.launches}"
    case.check()


# ---------------------------------------------------------------------------
# conversion edge values: every dtype pair, contiguous and strided, vs torch
# ---------------------------------------------------------------------------

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
    for dtype in FLOAT_DTYPES:
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
    for dtype in INT_DTYPES:
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


ALL_PAIRS = [(s, d) for s in TRITON_DTYPES for d in TRITON_DTYPES]


@pytest.mark.copy_
@pytest.mark.parametrize("pair", ALL_PAIRS, ids=_pair_id)
def test_copy_conversion_edge_values(pair):
    src_dtype, dst_dtype = pair
    values = edge_values(src_dtype)
    values = values[c_defined(values, dst_dtype)]
    n = values.numel()
    fill = torch.ones((), dtype=dst_dtype)  # what the copy must not touch
    layouts = {
        # name: (src base, src view, dst base, dst view)
        "contiguous": (values, _same, fill.expand(n), _same),
        "strided_src": (
            values.repeat_interleave(3).view(n, 3),
            lambda t: t[:, 1],
            fill.expand(n),
            _same,
        ),
        "strided_dst": (values, _same, fill.expand(n, 2), lambda t: t[:, 0]),
    }
    for layout, (src_base, src_view, dst_base, dst_view) in layouts.items():
        what = f"{layout}-{_pair_id(pair)}"
        dev_dst_base = dst_base.contiguous().to(DEVICE, copy=True)
        src = src_view(src_base.contiguous().to(DEVICE, copy=True))
        dst = dst_view(dev_dst_base)
        with track_paths() as paths:
            gems_copy_(dst, src)
        assert paths.fallbacks == 0, what
        assert paths.launches == expected_launches(dst, src), what
        ref = dst_base.contiguous().clone()
        dst_view(ref).copy_(src_view(src_base.contiguous()))
        assert_bit_exact(dev_dst_base, ref, what, src_dtype == dst_dtype)


# ---------------------------------------------------------------------------
# direct op-function calls, no torch dispatch (the seed's standalone suite)
# ---------------------------------------------------------------------------

DIRECT_CASES = [(layout, torch.float32, torch.float32) for layout in LAYOUTS] + [
    ("expand_row", torch.float32, torch.bfloat16),
    ("transpose", torch.float32, torch.bfloat16),
    ("sdpa_mask", torch.bool, torch.bool),
    ("sdpa_mask", torch.float32, torch.float16),
    ("permute4d", torch.int64, torch.int32),
    ("step_slice", torch.float16, torch.float32),
]


@pytest.mark.copy_
@pytest.mark.parametrize(
    "layout, src_dtype, dst_dtype",
    DIRECT_CASES,
    ids=[f"{c[0]}-{_pair_id(c[1:])}" for c in DIRECT_CASES],
)
def test_copy_direct_call(layout, src_dtype, dst_dtype):
    case = Case(layout, src_dtype, dst_dtype, seed=1)
    with track_paths() as paths:
        out = copy_module().copy_(case.dst, case.src)
    assert out is case.dst
    assert paths.fallbacks == 0, case.name
    assert paths.launches == expected_launches(case.dst, case.src), case.name
    case.check()


@pytest.mark.copy
@pytest.mark.parametrize("layout", ["transpose", "sdpa_mask"])
def test_copy_functional(layout):
    # the functional copy (a direct call: FlagGems registers no aten::copy) copies
    # src into a tensor of the template's size and strides
    case = Case(layout, torch.float32, torch.bfloat16, seed=2)
    before = case.dst_base.clone()
    with track_paths() as paths:
        out = copy_module().copy(case.dst, case.src)
    assert paths.fallbacks == 0
    covers = case.dst.numel() == case.dst_base.numel()
    clone = [] if covers else [("_copy_kernel", 1)]
    assert paths.launches == clone + expected_launches(out, case.src), case.name
    assert out.shape == case.dst.shape and out.stride() == case.dst.stride()
    assert out.storage_offset() == case.dst.storage_offset()
    assert out.untyped_storage().data_ptr() != case.dev_dst_base.data_ptr()
    whole = out.as_strided(case.dst_base.shape, case.dst_base.stride(), 0)
    assert_bit_exact(whole, case.reference(), case.name, exact_nans=False)
    assert_bit_exact(case.dev_dst_base, before, "the template is not written")


@pytest.mark.copy
def test_copy_functional_keyword_arguments():
    # copy(template, src=..., non_blocking=...): torch's argument names work
    src = torch.randn(3, 5)
    template = torch.empty(5, 3, device=DEVICE).t()
    out = copy_module().copy(template, src=src.to(DEVICE), non_blocking=False)
    assert out.stride() == template.stride()
    assert_bit_exact(out, src, "keywords")


@pytest.mark.copy_
def test_copy_same_rank_broadcast_functional():
    # copy(template, x[:1]): the functional form broadcasts the same way
    src = torch.randn(4, 16)
    template = torch.empty(6, 16, device=DEVICE)
    out = copy_module().copy(template, src.to(DEVICE)[:1])
    assert_bit_exact(out, src[:1].expand(6, 16).contiguous(), "copy(template, x[:1])")


# ---------------------------------------------------------------------------
# rank coverage 1..8, strided source and strided destination
# ---------------------------------------------------------------------------


@pytest.mark.copy_
@pytest.mark.parametrize("rank", range(1, 9))
@pytest.mark.parametrize(
    "pair",
    [(torch.float32, torch.float32), (torch.float32, torch.bfloat16)],
    ids=_pair_id,
)
def test_copy_rank_coverage(rank, pair):
    shape = tuple(2 + (i % 2) for i in range(rank))
    gen = torch.Generator().manual_seed(rank)
    src_base = make_values(shape[::-1], pair[0], pair[1], gen)
    dst_base = make_values(shape[:-1] + (2 * shape[-1],), pair[1], pair[1], gen)

    def src_view(t):  # reversed permutation
        return t.permute(*reversed(range(rank)))

    def dst_view(t):  # every other element of the innermost dim
        return t[..., ::2]

    dev_dst_base = dst_base.to(DEVICE, copy=True)
    with track_paths() as paths:
        gems_copy_(dst_view(dev_dst_base), src_view(src_base.to(DEVICE, copy=True)))
    assert paths.fallbacks == 0 and paths.launches == [("copy_slice", rank)]
    ref = dst_base.clone()
    dst_view(ref).copy_(src_view(src_base))
    assert_bit_exact(dev_dst_base, ref, f"rank{rank}", pair[0] == pair[1])


# ---------------------------------------------------------------------------
# same-rank broadcasts: a size-1 source dim with a real (nonzero) stride
# ---------------------------------------------------------------------------

# name: (src base shape, src view, dst base shape, dst view)
SAME_RANK_BROADCASTS = {
    # a (1, C) bias row into (N, C): the most common broadcast there is
    "row_1xC": ((1, 33), _same, (8, 33), _same),
    "row_into_two_rows": ((1, 33), _same, (2, 33), _same),
    "first_row": ((5, 33), lambda s: s[:1], (8, 33), _same),
    "row_into_transposed": ((1, 33), _same, (33, 8), lambda d: d.t()),
    "row_into_step_slice": ((5, 33), lambda s: s[3:4], (8, 66), lambda d: d[:, ::2]),
    # a middle dim: (B, 1, S) sliced out of a bigger tensor, into (B, H, S)
    "middle_dim": ((3, 4, 10), lambda s: s[:, 1:2, ::2], (3, 6, 5), _same),
    "outer_and_inner": ((1, 7, 1), _same, (4, 7, 3), _same),
    "one_element_1x1": ((5, 6), lambda s: s[2:3, 4:5], (3, 4), _same),
    "0d_view": ((6,), lambda s: s[4], (5, 7), _same),
    "0d_into_0d": ((6,), lambda s: s[4], (3,), lambda d: d[2]),
}
SAME_RANK_PAIRS = [
    (torch.float32, torch.float32),
    (torch.float32, torch.bfloat16),
    (torch.int64, torch.float16),
    (torch.bfloat16, torch.float32),
    (torch.int32, torch.bool),
]


@pytest.mark.copy_
@pytest.mark.parametrize("pair", SAME_RANK_PAIRS, ids=_pair_id)
@pytest.mark.parametrize("layout", list(SAME_RANK_BROADCASTS))
def test_copy_same_rank_broadcast(layout, pair):
    src_shape, src_view, dst_shape, dst_view = SAME_RANK_BROADCASTS[layout]
    gen = torch.Generator().manual_seed(11)
    src_base = make_values(src_shape, pair[0], pair[1], gen)
    dst_base = make_values(dst_shape, pair[1], pair[1], gen)
    dev_dst_base = dst_base.to(DEVICE, copy=True)
    src = src_view(src_base.to(DEVICE, copy=True))
    dst = dst_view(dev_dst_base)
    assert src.dim() in (0, dst.dim())
    with track_paths() as paths:
        gems_copy_(dst, src)
    name = f"{layout}-{_pair_id(pair)}"
    assert paths.fallbacks == 0, name
    assert paths.launches == expected_launches(dst, src), f"{name}: {paths.launches}"
    ref = dst_base.clone()
    dst_view(ref).copy_(src_view(src_base))
    assert_bit_exact(dev_dst_base, ref, name, pair[0] == pair[1])


@pytest.mark.copy_
def test_copy_into_size1_dim_with_zero_stride():
    # one row of an expanded buffer, buf.expand(4, C)[1:2], has shape (1, C) and
    # strides (0, 1): torch reports internal overlap only for a broadcast dim of
    # size > 1, so it is written like any row
    src = torch.randn(1, 16)
    dst = torch.zeros(16, device=DEVICE)
    view = dst.expand(4, 16)[1:2]
    assert view.stride() == (0, 1)
    with track_paths() as paths:
        gems_copy_(view, src.to(DEVICE))
    assert paths.fallbacks == 0 and paths.launches == [("_copy_kernel", 2)]
    assert_bit_exact(dst, src[0], "a row of an expanded destination")


# ---------------------------------------------------------------------------
# gap checks: torch's semantics, errors, and what goes to the fallback
# ---------------------------------------------------------------------------


@pytest.mark.copy_
@pytest.mark.parametrize(
    "dst_shape, src_shape",
    [
        ((2, 3), (4,)),
        ((2, 3), (4, 3)),
        ((3,), (2, 3)),
        ((1, 3), (2, 3)),
        ((0, 3), (4,)),
        ((4, 3), (2, 3)),  # a half batch into a full buffer
        ((3,), (4, 3)),  # a batch into one row
        ((0, 3), (4, 3)),  # a batch into an empty buffer
    ],
)
def test_copy_illegal_broadcast(dst_shape, src_shape):
    expected = torch_error(lambda: torch.zeros(dst_shape).copy_(torch.ones(src_shape)))
    dst = torch.full(dst_shape, 7.0, device=DEVICE)
    src = torch.ones(src_shape, device=DEVICE)
    with track_paths() as paths, pytest.raises(expected[0]) as err:
        gems_copy_(dst, src)
    assert str(err.value) == expected[1]
    assert paths.launches == [] and paths.fallbacks == 0
    assert bool((dst.cpu() == 7.0).all()), "destination was written before the error"


def _overlap_cases():
    def internal(x):
        return x[0].expand(4, 4), torch.ones(4, 4, device=x.device)

    def internal_and_bad_shape(x):  # torch reports the overlap first
        return x[0].expand(4, 4), torch.ones(3, device=x.device)

    def transpose(x):
        return x, x.t()

    def shifted(x):
        return x[1:], x[:-1]

    def element_inside(x):  # a one-element source inside the written row
        return x[0, :3], x[0, 1]

    def transpose_back(x):
        return x.t(), x

    def element_in_wider_element(x):  # an int16 inside the int32 it is part of
        return x.view(torch.int16).view(-1)[1:2], x.view(torch.int32).view(-1)[:1]

    def empty_source_inside(x):  # no bytes, so no overlap: torch's broadcast error
        return x[0], x[0, 2:2]

    def shifted_back(x):
        return x[:-1], x[1:]

    def empty_far_reaching_source(x):  # no bytes, so no overlap: the broadcast error
        # (an empty view's data_ptr() is null, yet its strides may span past the
        # storage: as_strided checks no storage for it)
        return x.view(-1), x.as_strided((2**50, 0), (1, 1))

    def partial_and_bad_shape(x):  # torch reports the overlap first
        return x.view(-1)[:6], x.view(-1)[4:8]

    return {
        "internal": internal,
        "internal_and_bad_shape": internal_and_bad_shape,
        "transpose": transpose,
        "shifted": shifted,
        "element_inside": element_inside,
        "transpose_back": transpose_back,
        "element_in_wider_element": element_in_wider_element,
        "empty_source_inside": empty_source_inside,
        "shifted_back": shifted_back,
        "empty_far_reaching_source": empty_far_reaching_source,
        "partial_and_bad_shape": partial_and_bad_shape,
    }


@pytest.mark.copy_
@pytest.mark.parametrize("kind", list(_overlap_cases()))
def test_copy_overlap_errors(kind):
    make = _overlap_cases()[kind]
    cpu = torch.arange(16.0).view(4, 4)
    expected = torch_error(lambda: (lambda d, s: d.copy_(s))(*make(cpu.clone())))
    x = cpu.to(DEVICE, copy=True)
    with track_paths() as paths, pytest.raises(expected[0]) as err:
        gems_copy_(*make(x))
    assert str(err.value) == expected[1]
    assert paths.launches == [] and paths.fallbacks == 0
    assert_bit_exact(x, cpu, f"{kind}: destination untouched")


@pytest.mark.copy_
@pytest.mark.parametrize(
    "views",
    [
        # an empty int16 view pointing into the int32 it aliases
        lambda x: (x.view(torch.int16)[1:1], x.view(torch.int32)[:1]),
        # an empty view whose strides span 2**50 elements (as_strided checks no
        # storage for an empty view)
        lambda x: (x.as_strided((2**50, 0), (1, 1)), x[:1]),
    ],
    ids=["inside_a_source_element", "far_reaching"],
)
def test_copy_alias_empty_destination(views):
    # an empty view's data_ptr() is null: no bytes, no overlap, nothing to do (torch's
    # copy_ is a no-op too)
    cpu = torch.arange(16.0)
    x = cpu.to(DEVICE, copy=True)
    dst, src = views(x)
    assert dst.data_ptr() == 0 and torch._C._is_alias_of(dst, src)
    with track_paths() as paths:
        gems_copy_(dst, src)
    assert paths.launches == [] and paths.fallbacks == 0
    assert_bit_exact(x, cpu, "empty destination")


@pytest.mark.copy_
def test_copy_direct_call_defaults_to_a_blocking_copy(monkeypatch):
    # torch's copy_ blocks unless asked not to, and so does a direct call's fallback
    seen = []
    redispatch = torch.ops.aten.copy_.default.redispatch

    def spy(*args):
        seen.append(args[-1])
        return redispatch(*args)

    monkeypatch.setattr(torch.ops.aten.copy_.default, "redispatch", spy)
    src = torch.randn(3, 4, dtype=torch.complex64, device=DEVICE)  # a fallback dtype

    def dst():
        return torch.zeros(3, 4, dtype=torch.complex64, device=DEVICE)

    copy_module().copy_(dst(), src)
    copy_module().copy_(dst(), src, True)
    copy_module().copy(dst(), src)  # functional copy
    copy_module().copy(dst(), src, non_blocking=True)
    assert seen == [False, True, False, True]


@pytest.mark.copy_
def test_copy_slice_kernel_is_kept():
    # other kunlunxin ops (slice_scatter, select_scatter) import copy_slice from here
    src = torch.randn(4, 6)
    dst = torch.zeros(8, 6, device=DEVICE)
    strided_module().copy_slice(src.to(DEVICE), out0=dst[::2])
    ref = torch.zeros(8, 6)
    ref[::2] = src
    assert_bit_exact(dst, ref, "copy_slice into a step slice")


_ALIAS_WITHOUT_ERROR = {
    # x[:, ::2] <- x[:, 1::2]: one storage, disjoint elements, interleaved bytes
    "interleaved": lambda x: (x[:, ::2], x[:, 1::2]),
    # x[0, :6] <- x[:, 0]: one element shared, the source not dense; torch cannot
    # classify that overlap and copies without an error
    "row_from_column": lambda x: (x[0, :6], x[:, 0]),
}


@pytest.mark.copy_
@pytest.mark.parametrize("views", list(_ALIAS_WITHOUT_ERROR))
def test_copy_alias_without_error(views):
    make = _ALIAS_WITHOUT_ERROR[views]
    cpu = torch.randn(6, 8)
    x = cpu.to(DEVICE, copy=True)
    dst, src = make(x)
    with track_paths() as paths:
        gems_copy_(dst, src)
    ref = cpu.clone()
    ref_dst, ref_src = make(ref)
    ref_dst.copy_(ref_src)
    # the byte ranges overlap, the source is not dense: it is read whole first
    assert paths.fallbacks == 0
    assert paths.launches == expected_launches(dst, src, snapshot=True)
    assert_bit_exact(x, ref, views)


@pytest.mark.copy_
@pytest.mark.parametrize("step", [1, 2], ids=["dense", "strided"])
@pytest.mark.parametrize(
    "dst_rows, src_rows",
    [(2, 0), (0, 2), (3, 0), (0, 3)],
    ids=["up", "down", "up_with_gap", "down_with_gap"],
)
def test_copy_alias_disjoint_halves_need_no_snapshot(step, dst_rows, src_rows):
    # x[2:4, ::step] <- x[0:2, ::step] and back, touching or not: one buffer,
    # disjoint bytes: no error, one launch
    cpu = torch.randn(5, 6)
    x = cpu.to(DEVICE, copy=True)

    def views(t):
        return t[dst_rows : dst_rows + 2, ::step], t[src_rows : src_rows + 2, ::step]

    with track_paths() as paths:
        gems_copy_(*views(x))
    ref = cpu.clone()
    (lambda d, s: d.copy_(s))(*views(ref))
    assert paths.fallbacks == 0
    assert paths.launches == expected_launches(*views(x))  # no snapshot launch
    assert_bit_exact(x, ref, "disjoint halves")


@pytest.mark.copy_
@pytest.mark.parametrize(
    "n, dst_start, src_start, snapshot",
    [(9, 4, 0, True), (9, 0, 4, True), (10, 0, 5, False), (10, 5, 0, False)],
    ids=["one-shared-dst-after", "one-shared-src-after", "touching", "touching-rev"],
)
def test_copy_alias_strided_views_read_first_only_when_sharing(
    n, dst_start, src_start, snapshot
):
    # x[a:a+5:2] <- x[b:b+5:2]. Sharing only one element (src's last is dst's first,
    # or the reverse) is still an overlap: src is read whole before anything is
    # written (a snapshot launch, then the copy). One view starting right after the
    # other's last element is no overlap: one launch.
    cpu = torch.randn(n)
    x = cpu.to(DEVICE, copy=True)
    dst, src = x[dst_start : dst_start + 5 : 2], x[src_start : src_start + 5 : 2]
    with track_paths() as paths:
        gems_copy_(dst, src)
    ref = cpu.clone()
    ref[dst_start : dst_start + 5 : 2] = cpu[src_start : src_start + 5 : 2].clone()
    assert paths.fallbacks == 0
    assert paths.launches == expected_launches(dst, src, snapshot)
    assert_bit_exact(x, ref, f"x[{dst_start}::2] <- x[{src_start}::2]")


@pytest.mark.copy_
@pytest.mark.parametrize(
    "views",
    [lambda x: (x[:3], x[1:1]), lambda x: (x, x[:3]), lambda x: (x[:3], x)],
    ids=["empty_source", "source_is_a_prefix", "destination_is_a_prefix"],
)
def test_copy_alias_size_mismatch_reports_the_broadcast_error(views):
    # torch checks overlap only for non-empty tensors, and a view of the same start
    # and strides is a no-op only at the same shape: the size mismatch is the error
    expected = torch_error(lambda: (lambda d, s: d.copy_(s))(*views(torch.zeros(6))))
    x = torch.full((6,), 7.0, device=DEVICE)
    with pytest.raises(expected[0]) as err:
        gems_copy_(*views(x))
    assert str(err.value) == expected[1]
    assert bool((x.cpu() == 7.0).all())


@pytest.mark.copy_
def test_copy_alias_overlapping_views_read_before_write():
    # Overlap torch cannot classify (non-dense views): we read all of src first.
    cpu = torch.randn(5, 9)
    x = cpu.to(DEVICE, copy=True)
    with track_paths() as paths:
        gems_copy_(x[:, 1:], x[:, :-1])
    ref = cpu.clone()
    ref[:, 1:] = cpu[:, :-1].clone()
    assert paths.fallbacks == 0
    assert paths.launches == [("copy_slice", 2), ("copy_slice", 2)]  # snapshot, copy
    assert_bit_exact(x, ref, "shifted alias")


@pytest.mark.copy_
def test_copy_self_alias_is_noop():
    x = torch.randn(4, 6, device=DEVICE).t()
    before = x.clone()
    with track_paths() as paths:
        gems_copy_(x, x)
        gems_copy_(x, x[:])  # another view with identical metadata
    assert paths.launches == [] and paths.fallbacks == 0
    assert_bit_exact(x, before.cpu(), "self copy")


@pytest.mark.copy_
def test_copy_full_overlap_dtype_view():
    # Same bytes, same strides, other dtype: torch allows the in-place cast.
    cpu = (torch.randn(8, 8) * 1000).round()
    x = cpu.to(DEVICE, copy=True)
    with track_paths() as paths:
        gems_copy_(x.view(torch.int32), x)
    ref = cpu.clone()
    ref.view(torch.int32).copy_(ref)
    assert paths.fallbacks == 0 and paths.launches == [("_copy_kernel", 2)]
    assert_bit_exact(x, ref, "int32 view of itself")


# Aliasing and special tensors, each against torch's result or error (destination
# untouched on an error), cut from 16-element buffers.
_ALIASING = (
    "partial_overlap",
    "one_element_shared_src_first",
    "one_element_shared_dst_first",
    "overlapping_views",
    "overlapping_views_neg",
    "self_view",
    "self_neg",
    "adjacent_halves",
    "adjacent_halves_dst_first",
    "bytes_shared_across_dtypes",
    "adjacent_across_dtypes",
)
# variant: kernels launched (each at the destination's rank); None: an error
_VARIANT_KERNELS = {
    "src_neg": ["copy_slice", "_negate_kernel"],
    "dst_neg": ["copy_slice", "_negate_kernel"],
    "src_zero": [],  # dst.zero_()
    "dst_zero": None,
    "src_meta": None,  # the fallback raises torch's error
    "partial_overlap": None,
    "one_element_shared_src_first": None,
    "one_element_shared_dst_first": None,
    "overlapping_views": ["copy_slice", "copy_slice"],  # snapshot, then the copy
    "overlapping_views_neg": ["copy_slice", "copy_slice", "_negate_kernel"],
    "self_view": [],  # the same view: a no-op
    "self_neg": ["_copy_kernel", "_negate_kernel"],  # x <- -x, in place
    "adjacent_halves": ["_copy_kernel"],
    "adjacent_halves_dst_first": ["_copy_kernel"],
    "bytes_shared_across_dtypes": None,
    "adjacent_across_dtypes": ["_copy_kernel"],
}


def _views(variant, dst_buf, src_buf):
    """The variant's dst and src layouts, cut from 16-element buffers."""
    if variant == "partial_overlap":  # dense, 16-byte aligned, sharing half
        return dst_buf[:8], src_buf[4:12]
    if variant == "one_element_shared_src_first":  # src's last element is dst's first
        return dst_buf[7:15], src_buf[:8]
    if variant == "one_element_shared_dst_first":
        return dst_buf[:8], src_buf[7:15]
    if variant == "adjacent_halves":  # one storage, no byte in common
        return dst_buf[8:], src_buf[:8]
    if variant == "adjacent_halves_dst_first":
        return dst_buf[:8], src_buf[8:]
    if variant == "bytes_shared_across_dtypes":  # float32 [0, 32), int16 [24, 40)
        return dst_buf[:8], src_buf.view(torch.int16)[12:20]
    if variant == "adjacent_across_dtypes":  # float32 [16, 48), int16 [0, 16)
        return dst_buf[4:12], src_buf.view(torch.int16)[:8]
    if variant.startswith("overlapping_views"):  # not dense: torch reads all first
        return dst_buf.view(4, 4)[1:, :3], src_buf.view(4, 4)[:3, 1:]
    if variant == "self_view":
        return dst_buf.view(4, 4).t(), src_buf.view(4, 4).t()
    if variant in ("src_zero", "dst_zero", "self_neg"):
        return dst_buf.view(4, 4), src_buf.view(4, 4)
    return dst_buf.view(4, 4), src_buf.view(4, 4).t()


def _variant(variant, buf, src_buf):
    dst, src = _views(variant, buf, buf if variant in _ALIASING else src_buf)
    if variant in ("src_neg", "overlapping_views_neg", "self_neg"):
        src = torch._neg_view(src)
    elif variant == "dst_neg":
        dst = torch._neg_view(dst)
    elif variant == "src_zero":
        src = torch._efficientzerotensor(src.shape, device=src.device)
    elif variant == "dst_zero":
        dst = torch._efficientzerotensor(dst.shape, device=dst.device)
    elif variant == "src_meta":
        src = src.to("meta")
    return dst, src


@pytest.mark.copy_
@pytest.mark.parametrize("variant", list(_VARIANT_KERNELS))
def test_copy_alias_and_special_tensors(variant):
    # a negation bit, a zero tensor on either side, a source elsewhere, a source
    # sharing bytes with the destination (one element either way, across dtypes,
    # views torch cannot classify, the same view): torch's result or error
    cpu = torch.arange(16, dtype=torch.float32) - 5
    aliasing = variant in _ALIASING
    buf = cpu.to(DEVICE, copy=True) if aliasing else torch.zeros(16, device=DEVICE)
    ref_buf = cpu.clone() if aliasing else torch.zeros(16)
    dst, src = _variant(variant, buf, cpu.to(DEVICE))
    ref_dst, ref_src = _variant(variant, ref_buf, cpu)
    if variant.startswith("overlapping_views"):  # every element reads its old value
        ref_src = ref_src.clone()
    before = host_view(buf).clone()
    try:
        ref_dst.copy_(ref_src)
        error = None
    except Exception as exc:  # noqa: BLE001 - we compare whatever torch raises
        error = exc
    kernels = _VARIANT_KERNELS[variant]
    assert (error is None) == (kernels is not None), f"torch: {error!r}"
    with track_paths() as paths:
        if error is None:
            assert copy_module().copy_(dst, src) is dst
        else:
            with pytest.raises(type(error)) as err:
                copy_module().copy_(dst, src)
    if error is None:
        assert_bit_exact(buf, ref_buf, variant)
    else:
        assert str(err.value) == str(error)
        assert_bit_exact(buf, before, f"{variant}: destination untouched")
    assert paths.fallbacks == (variant == "src_meta")
    assert paths.launches == [(k, dst.dim()) for k in kernels or []]


@pytest.mark.copy_
def test_copy_empty():
    with track_paths() as paths:
        gems_copy_(torch.empty(0, 3, device=DEVICE), torch.ones(3, device=DEVICE))
        gems_copy_(
            torch.empty(3, 0, device=DEVICE).t(),
            torch.empty(3, device=DEVICE).expand(0, 3),
        )
        # an empty view of a buffer overlapping the source's bytes (its sizes and
        # strides span them): no element, so no overlap either, as torch
        x = torch.zeros(16, device=DEVICE)
        torch.zeros(16).view(4, 4)[:, :0].copy_(torch.zeros(16)[5:6])  # torch: ok
        gems_copy_(x.view(4, 4)[:, :0], x[5:6])
        # an empty destination with a stride-0 dim of size > 1: no internal
        # overlap for torch (no element at all)
        dst = torch.empty(1, device=DEVICE).as_strided((4, 0), (0, 1))
        torch.empty(1).as_strided((4, 0), (0, 1)).copy_(torch.ones(4, 0))  # torch: ok
        gems_copy_(dst, torch.ones(4, 0, device=DEVICE))
    assert paths.launches == [] and paths.fallbacks == 0


@pytest.mark.copy_
def test_copy_internal_overlap_is_checked_for_a_non_empty_destination_only(
    monkeypatch,
):
    # at::has_internal_overlap calls an empty tensor dense; FlagGems' helper does
    # too, and torch calls it contiguous, which copy_ asks first: pinned with a
    # helper that says Yes, an empty (also a permuted empty) dst still copies, a
    # non-contiguous one raises
    mod, op = strided_module(), copy_module()
    monkeypatch.setattr(mod, "has_internal_overlapping", lambda t: mod.MemOverlap.Yes)
    for empty in (
        torch.empty(0, 3, device=DEVICE),
        torch.empty(3, 0, device=DEVICE).t(),
    ):
        with track_paths() as paths:
            assert op.copy_(empty, torch.ones(3, device=DEVICE)) is empty
        assert paths.launches == [] and paths.fallbacks == 0
    dst = torch.zeros(3, 2, device=DEVICE).t()
    with pytest.raises(RuntimeError, match="more than one element of the written-to"):
        op.copy_(dst, torch.ones(3, device=DEVICE))
    assert bool((dst.cpu() == 0).all())


@pytest.mark.copy_
def test_copy_zero_dim():
    dst = torch.zeros((), device=DEVICE)
    with track_paths() as paths:
        gems_copy_(dst, torch.tensor(2.5, device=DEVICE))
        gems_copy_(torch.empty(3, device=DEVICE)[1], torch.tensor(1.0, device=DEVICE))
    assert paths.fallbacks == 0
    assert paths.launches == [("_copy_kernel", 0), ("_copy_kernel", 0)]
    assert dst.item() == 2.5


@pytest.mark.copy_
def test_copy_zero_tensors():
    z = torch._efficientzerotensor(3, device=DEVICE)
    expected = torch_error(lambda: torch._efficientzerotensor(3).copy_(torch.ones(3)))
    with pytest.raises(expected[0]) as err:
        copy_module().copy_(z, torch.ones(3, device=DEVICE))
    assert str(err.value) == expected[1]
    dst = torch.ones(2, 3, device=DEVICE)
    with track_paths() as paths:
        copy_module().copy_(dst, torch._efficientzerotensor(3, device=DEVICE))
    assert paths.launches == [] and paths.fallbacks == 0
    assert bool((dst.cpu() == 0).all())


# ---------------------------------------------------------------------------
# Python numbers
# ---------------------------------------------------------------------------


@pytest.mark.copy_
@pytest.mark.parametrize("value", [[1, 2, 3], None, "3"], ids=repr)
def test_copy_direct_call_rejects_what_is_not_a_number(value):
    # torch's Tensor.copy_ takes a tensor or a number; anything else is a TypeError,
    # raised before anything is written
    dst = torch.full((2, 3), 7.0, device=DEVICE)
    with track_paths() as paths, pytest.raises(TypeError, match="must be Tensor"):
        copy_module().copy_(dst, value)
    assert paths.launches == [] and paths.fallbacks == 0
    assert bool((dst.cpu() == 7.0).all())


def _number_launches(dst, value, dispatched=False):
    """(fallbacks, launches) of copy_(dst, number).

    The number is converted on the host from float64/int64/bool into dst's dtype
    and copied as a 0-d source (a complex one, or into a dtype Triton lacks: aten).
    Under use_gems that conversion is itself a dispatched copy_ in cpu mode (the
    host is the device), and the transfer to the device one elsewhere.
    """
    triton_dtypes = strided_module()._TRITON_DTYPES
    host = torch.tensor(value, dtype=torch.float64 if type(value) is float else None)
    if host.is_complex() or dst.dtype not in triton_dtypes:
        if dispatched and DEVICE != "cpu":
            # aten's host->device copy, dispatched again: the host value into a
            # contiguous buffer on the device (cross-device), and that buffer into a
            # non-contiguous dst (a dtype Triton lacks); both fall back
            return 2 + (not dst.is_contiguous()), []
        return 1, []
    fallbacks, launches = 0, []
    if dispatched and DEVICE == "cpu" and host.dtype != dst.dtype:
        if host.dtype in triton_dtypes:
            launches += expected_launches(torch.empty((), dtype=dst.dtype), host)
        else:
            fallbacks += 1
    elif dispatched and DEVICE != "cpu":
        fallbacks += 1
    launches += expected_launches(dst, torch.empty((), dtype=dst.dtype))
    return fallbacks, launches


@pytest.mark.copy_
@pytest.mark.parametrize("value", [3.7, -2, True, 1j], ids=repr)
def test_copy_direct_call_takes_a_python_number(value):
    ref = torch.full((2, 3), 7.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # complex -> real: torch warns
        ref.copy_(value)
        dst = torch.full((3, 2), 7.0, device=DEVICE).t()
        with track_paths() as paths:
            assert copy_module().copy_(dst, value) is dst
    assert (paths.fallbacks, paths.launches) == _number_launches(dst, value)
    assert_bit_exact(dst, ref, repr(value))


# Numbers through Tensor.copy_: torch wraps a float as a float64 tensor, an int as
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
]


@pytest.mark.copy_
@pytest.mark.parametrize("value, dtype", SCALAR_CASES, ids=lambda x: str(x))
def test_copy_python_scalar_through_dispatch(value, dtype):
    ref = torch.zeros(3, 4, dtype=dtype)
    ref.copy_(value)
    dst = torch.zeros(4, 6, dtype=dtype, device=DEVICE)[:, ::2].t()
    with track_paths() as paths:
        gems_copy_(dst, value)
    assert (paths.fallbacks, paths.launches) == _number_launches(dst, value, True)
    assert_bit_exact(dst, ref, f"scalar {value!r} -> {dtype}")


# ---------------------------------------------------------------------------
# what goes to the aten fallback, and why
# ---------------------------------------------------------------------------


@pytest.mark.copy_
def test_copy_complex_to_real_keeps_warning():
    src = torch.randn(4, 6, dtype=torch.complex64)
    dst = torch.zeros(4, 6, device=DEVICE)
    torch.set_warn_always(True)
    try:
        with track_paths() as paths, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gems_copy_(dst, src.to(DEVICE))
    finally:
        torch.set_warn_always(False)
    assert paths.fallbacks == 1 and paths.launches == []
    assert any("discards the imaginary part" in str(w.message) for w in caught)
    assert_bit_exact(dst, src.real.contiguous(), "complex->real")


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
        dst = torch.zeros(3, 5, dtype=dst_dtype, device=DEVICE)
        with track_paths() as paths:
            gems_copy_(dst, src.to(DEVICE))
        what = f"{src_dtype}->{dst_dtype}"
        assert (paths.fallbacks, len(paths.launches)) == (
            (1, 0) if falls_back else (0, 1)
        ), what
        assert_bit_exact(dst, src.to(dst_dtype), what)


@pytest.mark.copy_
def test_copy_fallback_reasons_name_the_cause():
    # the debug line of every fallback says why, so a slow path can be traced
    reason = strided_module().fallback_reason

    def t(dtype=torch.float32, device=DEVICE):
        return torch.zeros(2, 3, dtype=dtype, device=device)

    x = t()
    assert reason(x, t()) is None
    assert reason(x, torch._neg_view(t())) is None  # negation runs in Triton
    assert reason(torch._neg_view(x), t()) is None
    for dtype in INT_DTYPES + FLOAT_DTYPES:
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
    with track_paths() as paths:
        copy_module().copy_(dst_q, q)
    assert paths.fallbacks == 1 and paths.launches == []
    assert torch.equal(dst_q.int_repr(), q.int_repr())


@pytest.mark.copy_
def test_copy_sparse_is_dispatched_by_layout():
    # Tensor.copy_ picks the sparse kernel itself: copy_ is never reached
    sparse = torch.eye(3).to_sparse().to(DEVICE)
    # (torch's text names the device's tensor types: the reference runs there)
    expected = torch_error(lambda: torch.zeros(3, 3, device=DEVICE).copy_(sparse))
    with track_paths() as paths, pytest.raises(expected[0]) as err:
        gems_copy_(torch.zeros(3, 3, device=DEVICE), sparse)
    assert str(err.value) == expected[1]
    assert paths.launches == [] and paths.fallbacks == 0
    # sparse into sparse: the sparse kernel, which copies its dense indices and
    # values with copy_ (those reach the op as plain dense copies)
    dst = torch.zeros(3, 3).to_sparse().to(DEVICE)
    with track_paths() as paths:
        gems_copy_(dst, sparse.to(DEVICE))
    assert torch.equal(dst.to_dense().cpu(), torch.eye(3))
    assert paths.fallbacks == 0


@pytest.mark.copy_
@pytest.mark.parametrize("sparse_side", ["src", "dst"])
def test_copy_direct_call_with_sparse_gets_torchs_error(sparse_side):
    # a direct call is dispatched again, to the layout's kernel: torch's error
    # (before, _is_alias_of and the dense redispatch raised 'Cannot access storage
    # of SparseTensorImpl'), nothing written, no Triton launch, no dense fallback
    def make(device):
        dense, sparse = torch.zeros(3, 3, device=device), torch.eye(3).to_sparse()
        sparse = sparse.to(device)
        return (dense, sparse) if sparse_side == "src" else (sparse, dense)

    # torch's own error on the device (its text names the device's tensor types)
    expected = torch_error(lambda: make(DEVICE)[0].copy_(make(DEVICE)[1]))
    dst, src = make(DEVICE)
    with track_paths() as paths, pytest.raises(expected[0]) as err:
        copy_module().copy_(dst, src)
    assert str(err.value) == expected[1]
    assert paths.launches == [] and paths.fallbacks == 0
    assert torch.equal(dst.to_dense().cpu(), make("cpu")[0].to_dense())


@pytest.mark.copy_
def test_copy_direct_call_between_sparse_tensors():
    # sparse into sparse: the sparse kernel, as Tensor.copy_ would run it
    dst = torch.zeros(3, 3).to_sparse().to(DEVICE)
    src = (torch.eye(3) * 2).to_sparse().to(DEVICE)
    assert copy_module().copy_(dst, src) is dst
    assert torch.equal(dst.to_dense().cpu(), torch.eye(3) * 2)


@pytest.mark.copy_
def test_copy_cross_device_goes_to_fallback():
    src = torch.empty(3, 4, device="meta")
    expected = torch_error(lambda: torch.zeros(3, 4).copy_(src))
    dst = torch.zeros(3, 4, device=DEVICE)
    with track_paths() as paths, pytest.raises(expected[0]) as err:
        copy_module().copy_(dst, src)
    assert str(err.value) == expected[1]
    assert paths.fallbacks == 1 and paths.launches == []
    meta = torch.empty(3, 4, device="meta")  # into meta: nothing to do, as torch
    with track_paths() as paths:
        assert copy_module().copy_(meta, torch.ones(3, 4, device=DEVICE)) is meta
    assert paths.fallbacks == 1 and paths.launches == []
    if DEVICE != "cpu":  # host -> device, contiguous: the runtime's memcpy
        cpu_src = torch.randn(3, 4)
        with track_paths() as paths:
            copy_module().copy_(dst, cpu_src)
        assert paths.fallbacks == 1
        assert_bit_exact(dst, cpu_src, "host to device")


# ---------------------------------------------------------------------------
# negated views (the lazy neg bit): converted, then negated in Triton
# ---------------------------------------------------------------------------

NEG_CASES = [
    ("transpose", torch.float32, torch.float32),
    ("contiguous", torch.float16, torch.float16),
    ("transpose", torch.bfloat16, torch.bfloat16),
    ("dst_transposed", torch.int8, torch.int8),
    ("transpose", torch.int32, torch.int32),
    ("contiguous", torch.int64, torch.int64),
    ("transpose", torch.uint8, torch.uint8),
    ("transpose", torch.float32, torch.bfloat16),
    ("sdpa_mask", torch.bfloat16, torch.float32),
    ("transpose", torch.float32, torch.int32),
    ("contiguous", torch.bfloat16, torch.uint8),
    ("transpose", torch.int8, torch.int64),
    ("transpose", torch.int64, torch.bfloat16),
    ("expand_row", torch.int32, torch.float32),
    ("transpose", torch.bool, torch.float32),
    ("transpose", torch.bool, torch.bool),
]
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
    case = Case(layout, src_dtype, dst_dtype, seed=7, neg=neg)
    assert case.src.is_neg() == (neg != "dst") and case.dst.is_neg() == (neg != "src")
    with track_paths() as paths:
        out = gems_copy_(case.dst, case.src)
    assert out is case.dst
    assert paths.fallbacks == 0, f"{case.name} fell back to aten"
    expected = expected_launches(case.dst, case.src)
    assert paths.launches == expected, f"{case.name}: {paths.launches}"
    case.check()  # NaNs by position where negated (torch's bf16 neg rewrites them)


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
        if views == "float_src_neg":
            return base, base, torch._neg_view(src).t()
        if views == "bool_src_neg":
            return base, base, torch._neg_view(src != 0).t()
        if views == "bool_dst_neg":
            return base, torch._neg_view(base), (src != 0).t()
        return base, torch._neg_view(base), src.to(torch.int32).t()

    # torch's error names the device's kernel ("neg_cpu", "neg_cuda"): the reference
    # is aten on the test's device (harness tests run without the device model)
    ref_base, ref_dst, ref_src = make(DEVICE)
    expected = torch_error(lambda: ref_dst.copy_(ref_src))
    base, dst, src = make(DEVICE)
    with track_paths() as paths, pytest.raises(expected[0]) as err:
        gems_copy_(dst, src)
    assert str(err.value) == expected[1]
    assert paths.fallbacks == 1 and paths.launches == []
    assert_bit_exact(base, ref_base.cpu(), views)  # what torch wrote before raising


def _sign_flipped(x):
    """x with every float's sign bit flipped (bit for bit, NaN payloads kept)."""
    bits = BITS[x.element_size()]
    return (x.view(bits) ^ SIGN[x.element_size()]).view(x.dtype)


@pytest.mark.copy_
@pytest.mark.parametrize("dtype", FLOAT_DTYPES + [torch.float64], ids=SHORT.get)
def test_negate_kernel_flips_the_sign_bit(dtype):
    # torch's neg of 0.0 is -0.0 and of a NaN a NaN of the other sign; Triton's -x
    # (0 - x) would give +0.0 for 0.0. float64 too: its branch serves backends
    # that enable it (KunlunXIN's copy_ sends float64 to aten).
    x = edge_values(dtype if dtype in _LOW_PAYLOAD_NANS else torch.float32)
    nan = torch.tensor([float("nan")])
    x = torch.cat([x, nan, _sign_flipped(nan)]).to(dtype)
    assert {0.0} == set(x[x == 0].tolist()) and torch.signbit(
        x[x == 0]
    ).unique().numel() == 2
    with track_paths() as paths:
        out = strided_module()._negate_kernel(x.to(DEVICE))
    assert paths.launches == [("_negate_kernel", 1)]
    assert_bit_exact(out, _sign_flipped(x), f"_negate_kernel({SHORT[dtype]})")


@pytest.mark.copy_
def test_negate_kernel_wraps_integers():
    # as torch's neg: two's complement, -min == min, uint8 modulo 256
    mod = strided_module()
    for dtype in INT_DTYPES:
        x = edge_values(dtype)
        out = mod._negate_kernel(x.to(DEVICE))
        assert_bit_exact(out, torch.neg(x), f"_negate_kernel({SHORT[dtype]})")


@pytest.mark.copy_
@pytest.mark.parametrize(
    "src_dtype, dst_dtype, expected",
    [
        # the conversion first, then the negation in dst's dtype
        (torch.int8, torch.int32, [128, -127, 0, 1]),
        (torch.int8, torch.int8, [-128, -127, 0, 1]),
        (torch.int32, torch.int8, [-128, -127, 0, 1]),
        (torch.int8, torch.uint8, [128, 129, 0, 1]),
    ],
)
def test_copy_negated_int_min_wraps_as_torch(src_dtype, dst_dtype, expected):
    values = torch.tensor([-128, 127, 0, -1], dtype=src_dtype)
    ref = torch.zeros(4, dtype=dst_dtype)
    ref.copy_(torch._neg_view(values))
    assert ref.tolist() == expected  # torch's own result (its copy_, not ours)
    dst = torch.zeros(4, dtype=dst_dtype, device=DEVICE)
    with track_paths() as paths:
        gems_copy_(dst, torch._neg_view(values.to(DEVICE)))
    assert paths.fallbacks == 0
    assert paths.launches == [("_copy_kernel", 1), ("_negate_kernel", 1)]
    assert_bit_exact(dst, ref, f"-{SHORT[src_dtype]} -> {SHORT[dst_dtype]}")


@pytest.mark.copy_
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=SHORT.get)
def test_copy_negated_zero_and_nan_signs(dtype):
    # a negated view of +-0.0 and +-NaN copies as -+0.0 and -+NaN: the sign bit is
    # flipped, as torch's neg does for float32 and float16 (for bfloat16 torch's
    # CPU neg returns its quiet NaN 0x7FC0 whatever the sign: NaN-ness compared)
    nan = torch.tensor([float("nan")], dtype=dtype)
    # (-nan would be torch's bfloat16 neg: a positive NaN)
    values = torch.cat([torch.tensor([0.0, -0.0, 1.0], dtype=dtype), nan])
    values = torch.cat([values, _sign_flipped(nan)])
    expected_signs = [True, False, True, True, False]
    ref = torch.zeros(5, dtype=dtype)
    ref.copy_(torch._neg_view(values))
    if dtype is not torch.bfloat16:
        assert torch.signbit(ref).tolist() == expected_signs  # torch's own result
    for which in ("src", "dst"):
        dst = torch.zeros(5, dtype=dtype, device=DEVICE)
        src = values.to(DEVICE)
        with track_paths() as paths:
            if which == "src":
                gems_copy_(dst, torch._neg_view(src))
            else:  # into a negated view: its stored values are the negation
                gems_copy_(torch._neg_view(dst), src)
        assert paths.fallbacks == 0 and paths.launches[-1] == ("_negate_kernel", 1)
        assert torch.signbit(host_view(dst)).tolist() == expected_signs, which
        assert_bit_exact(dst, ref, f"signs {SHORT[dtype]}", exact_nans=False)


# ---------------------------------------------------------------------------
# _must_read_src_first: torch's partial-overlap error, or a snapshot, or neither
# ---------------------------------------------------------------------------

_READ_FIRST = {
    # name: (views of one 16-float buffer, expected: True, False or "raise")
    "dense_same_span_other_strides": (
        lambda x: (x.view(4, 4), x.view(4, 4).t()),
        "raise",
    ),
    "dense_shifted": (lambda x: (x[4:12], x[:8]), "raise"),
    "dense_shifted_back": (lambda x: (x[:8], x[4:12]), "raise"),
    "dense_element_inside": (lambda x: (x[:3], x[1]), "raise"),
    "dense_identical": (lambda x: (x.view(torch.int32), x), False),
    "dense_adjacent": (lambda x: (x[8:], x[:8]), False),
    "dense_adjacent_back": (lambda x: (x[:8], x[8:]), False),
    "dense_empty_src": (lambda x: (x[:0], x), False),
    "dense_empty_dst": (lambda x: (x, x[3:3]), False),
    # an empty view whose sizes and strides span bytes: still no element, no overlap
    "empty_dst_spanning": (lambda x: (x.view(4, 4)[:, :0], x[5:6]), False),
    "empty_src_spanning": (lambda x: (x[5:6], x.view(4, 4)[:, :0]), False),
    "non_dense_overlapping": (
        lambda x: (x.view(4, 4)[1:, :3], x.view(4, 4)[:3, 1:]),
        True,
    ),
    "non_dense_interleaved": (lambda x: (x[::2], x[1::2]), True),
    "non_dense_one_shared": (lambda x: (x[4:9:2], x[0:5:2]), True),
    "non_dense_touching": (lambda x: (x[5:10:2], x[0:5:2]), False),
    "non_dense_touching_back": (lambda x: (x[0:5:2], x[5:10:2]), False),
    "non_dense_disjoint": (lambda x: (x[8::2], x[:8:2]), False),
    "dense_into_non_dense": (lambda x: (x.view(4, 4)[:, 0], x[3:7]), True),
}


@pytest.mark.copy_
@pytest.mark.parametrize("case", list(_READ_FIRST))
def test_must_read_src_first(case):
    make, expected = _READ_FIRST[case]
    dst, src = make(torch.zeros(16, device=DEVICE))
    must_read_src_first = strided_module()._must_read_src_first
    if expected == "raise":
        torch_expected = torch_error(
            lambda: (lambda d, s: d.copy_(s))(*make(torch.zeros(16)))
        )
        with pytest.raises(torch_expected[0]) as err:
            must_read_src_first(dst, src)
        assert str(err.value) == torch_expected[1]
    else:
        assert must_read_src_first(dst, src) is expected


@pytest.mark.copy_
@pytest.mark.parametrize(
    "case",
    [
        "non_dense_interleaved",
        "non_dense_one_shared",
        "non_dense_touching",
        "dense_into_non_dense",
    ],
)
def test_copy_alias_snapshot_is_taken_when_must_read_src_first(case):
    make, snapshot = _READ_FIRST[case]
    cpu = torch.randn(16)
    x = cpu.to(DEVICE, copy=True)
    dst, src = make(x)
    with track_paths() as paths:
        gems_copy_(dst, src)
    ref = cpu.clone()
    ref_dst, ref_src = make(ref)
    ref_dst.copy_(ref_src.clone())  # every element reads its old value
    assert paths.fallbacks == 0
    assert paths.launches == expected_launches(dst, src, snapshot)
    assert_bit_exact(x, ref, case)


# ---------------------------------------------------------------------------
# int32 indexing: copies a launch cannot index are split along the outer dim
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# SDPA end to end: an expanded mask materialised by copy_ and fed to attention
# ---------------------------------------------------------------------------


@pytest.mark.copy_
@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.float32])
def test_sdpa_expanded_mask(mask_dtype):
    B, H, S, D = 2, 4, 16, 8
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(B, H, S, D, generator=gen) for _ in range(3))
    small = torch.rand(B, 1, 1, S, generator=gen) > 0.3
    small[..., 0] = True  # no fully masked row
    if mask_dtype is not torch.bool:
        small = torch.zeros(B, 1, 1, S).masked_fill(~small, float("-inf"))
    small = small.to(mask_dtype)

    mask = torch.empty(B, H, S, S, dtype=mask_dtype, device=DEVICE)
    with track_paths() as paths:
        gems_copy_(mask, small.to(DEVICE).expand(B, H, S, S))
    assert paths.fallbacks == 0 and paths.launches == [("copy_slice", 4)]
    assert_bit_exact(mask, small.expand(B, H, S, S).contiguous(), "sdpa mask")

    dq, dk, dv = (t.to(DEVICE) for t in (q, k, v))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    out = sdpa(dq, dk, dv, attn_mask=mask)
    ref = sdpa(dq, dk, dv, attn_mask=small.expand(B, H, S, S).contiguous().to(DEVICE))
    assert_bit_exact(out, ref.cpu(), "sdpa output")
    # the seed's scenario: the expanded view straight into attention under use_gems
    with flag_gems.use_gems(include=["copy_"]):
        direct = sdpa(dq, dk, dv, attn_mask=small.to(DEVICE).expand(B, H, S, S))
    torch.testing.assert_close(direct.cpu(), ref.cpu(), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------
# property-based fuzz: random shapes, views, negation bits and dtype pairs
# ---------------------------------------------------------------------------

FUZZ_EXAMPLES = int(os.environ.get("GEMS_COPY_FUZZ_EXAMPLES", "300"))
st = hypothesis.strategies


@st.composite
def strided_views(draw, shape, allow_broadcast):
    """A view of `shape` over a fresh base: permuted, stepped, offset, maybe expanded."""
    rank = len(shape)
    dims = []  # per dim: (broadcast, step, start)
    for size in shape:
        broadcast = allow_broadcast and size != 1 and draw(st.integers(0, 5)) == 0
        dims.append(
            (
                broadcast,
                draw(st.sampled_from([1, 1, 2, 3])),
                draw(st.integers(0, 1)),
            )
        )
    dropped = draw(st.integers(0, rank)) if allow_broadcast else 0
    # same-rank broadcast: a broadcast dim stays a size-1 slice with its real
    # stride, as in x[:1] or a (1, C) row, instead of being expanded
    implicit = allow_broadcast and draw(st.booleans())
    perm = draw(st.permutations(range(rank - dropped)))
    kept = dims[dropped:]
    kept_shape = shape[dropped:]
    base_shape = [
        1 + start if b else n * step + start
        for n, (b, step, start) in zip(kept_shape, kept)
    ]
    negated = draw(st.sampled_from([False, False, True]))

    def view(base):
        t = base.permute(sorted(range(len(perm)), key=lambda i: perm[i]))
        index = tuple(
            slice(start, start + 1) if b else slice(start, start + n * step, step)
            for n, (b, step, start) in zip(kept_shape, kept)
        )
        t = t[index] if implicit else t[index].expand(kept_shape)
        return torch._neg_view(t) if negated else t

    spec = f"base{tuple(base_shape[p] for p in perm)}.permute(inv{tuple(perm)})[{kept}] over {shape}"
    spec += " (broadcast by copy_)" if implicit else ""
    spec += " negated" if negated else ""
    return [base_shape[p] for p in perm], view, spec


@st.composite
def copy_problems(draw):
    rank = draw(st.integers(0, 6))
    shape = tuple(draw(st.sampled_from([0, 1, 1, 2, 2, 3, 3, 4])) for _ in range(rank))
    pair = draw(st.sampled_from(DTYPE_PAIRS))
    src = draw(strided_views(shape, allow_broadcast=True))
    dst = draw(strided_views(shape, allow_broadcast=False))
    return shape, pair, src, dst


@pytest.mark.copy_
@hypothesis.settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=bool(os.environ.get("CI")),
    suppress_health_check=list(hypothesis.HealthCheck),
)
@hypothesis.given(problem=copy_problems(), seed=st.integers(0, 2**16))
def test_copy_fuzz(problem, seed):
    shape, (src_dtype, dst_dtype), src, dst = problem
    (src_base_shape, src_view, src_spec), (dst_base_shape, dst_view, dst_spec) = (
        src,
        dst,
    )
    layout = f"{SHORT[src_dtype]}->{SHORT[dst_dtype]} src={src_spec} dst={dst_spec}"
    hypothesis.note(layout)
    gen = torch.Generator().manual_seed(seed)
    src_base = make_values(tuple(src_base_shape), src_dtype, dst_dtype, gen)
    dst_base = make_values(tuple(dst_base_shape), dst_dtype, dst_dtype, gen)
    dev_dst_base = dst_base.to(DEVICE, copy=True)
    dev_src = src_view(src_base.to(DEVICE, copy=True))
    dev_dst = dst_view(dev_dst_base)
    negation = dev_src.is_neg() != dev_dst.is_neg()
    # negation into bool raises in torch (test_copy_negation_into_bool)
    hypothesis.assume(not (negation and dst_dtype is torch.bool))
    with track_paths() as paths:
        gems_copy_(dev_dst, dev_src)
    numel = 1
    for n in shape:
        numel *= n
    assert paths.fallbacks == 0, layout
    expected = expected_launches(dev_dst, dev_src) if numel else []
    assert paths.launches == expected, layout
    ref = dst_base.clone()
    torch_copy_(dst_view(ref), src_view(src_base))
    assert_bit_exact(dev_dst_base, ref, layout, src_dtype == dst_dtype and not negation)


@pytest.mark.copy_
def test_copy_into_a_conjugate_view_of_itself_is_not_a_noop():
    # same memory, same layout, but only dst has the conjugate bit: not the self-alias
    # no-op (torch writes conj(z) into z's memory); complex goes to aten
    host = torch.tensor([1 + 2j, -3 - 4j, 5j], dtype=torch.complex64)
    host.conj().copy_(host)
    z = torch.tensor([1 + 2j, -3 - 4j, 5j], dtype=torch.complex64, device=DEVICE)
    copy_module().copy_(z.conj(), z)
    assert torch.equal(z.cpu(), host)


@pytest.mark.copy_
def test_copy_of_a_conjugate_view_into_itself_is_not_a_noop():
    # the other way round: only src has the conjugate bit
    host = torch.tensor([1 + 2j, -3 - 4j, 5j], dtype=torch.complex64)
    host.copy_(host.conj())
    z = torch.tensor([1 + 2j, -3 - 4j, 5j], dtype=torch.complex64, device=DEVICE)
    copy_module().copy_(z, z.conj())
    assert torch.equal(z.cpu(), host)


@pytest.mark.copy_
@pytest.mark.parametrize("negated", ["dst", "src"])
def test_copy_between_a_tensor_and_its_negated_view_is_not_a_noop(negated):
    # same memory, offset, strides, size and dtype; only one side has the negation
    # bit: not the self-alias no-op (torch negates the memory, signed zeros too)
    def views(x):
        neg = torch._neg_view(x)
        return (neg, x) if negated == "dst" else (x, neg)

    cpu = torch.tensor([[1.0, -2.0, 0.0], [3.5, -0.0, float("inf")]])
    ref = cpu.clone()
    ref_dst, ref_src = views(ref)
    ref_dst.copy_(ref_src)
    x = cpu.to(DEVICE, copy=True)
    with track_paths() as paths:
        gems_copy_(*views(x))
    assert paths.fallbacks == 0
    assert_bit_exact(x, ref, f"{negated} negated, same memory")


def test_runs_flat_is_the_device_models_flat_loop():
    """runs_flat (what the head integration leaves to native) says yes exactly where the
    device model's native copy runs: one flat loop, every other layout faults."""
    from copyfix.emulation import faults

    runs_flat = strided_module().runs_flat
    layouts = {
        "contiguous": lambda: torch.empty(4, 6),
        "transposed": lambda: torch.empty(6, 4).t(),
        "step_slice": lambda: torch.empty(4, 12)[:, ::2],
        "expanded": lambda: torch.empty(1, 6).expand(4, 6),
        "permuted_3d": lambda: torch.empty(2, 3, 4).permute(2, 0, 1).reshape(4, 6),
        "other_shape": lambda: torch.empty(6, 4),
        "transposed_3d": lambda: torch.empty(6, 2, 2).permute(1, 2, 0).reshape(4, 6),
    }
    seen = set()
    for d_name, make_dst in layouts.items():
        for s_name, make_src in layouts.items():
            dst, src = make_dst(), make_src()
            want = faults.is_flat_loop(dst, src)
            assert runs_flat(dst, src) == want, (d_name, s_name)
            seen.add(want)
    assert seen == {True, False}
    # dense with equal strides, neither contiguous: flat
    assert runs_flat(torch.empty(6, 4).t(), torch.empty(6, 4).t())
    assert not runs_flat(torch.empty(6, 4).t(), torch.empty(4, 6))
    # overlapping with equal strides: not flat
    assert not runs_flat(torch.empty(1, 6).expand(4, 6), torch.empty(1, 6).expand(4, 6))
    # both contiguous, with strides that differ in a size-1 dim: flat
    dst, src = torch.empty(1, 6), torch.empty(6, 1).t()
    assert dst.stride() != src.stride() and faults.is_flat_loop(dst, src)
    assert runs_flat(dst, src)


def _general_path_calls(monkeypatch):
    """Count triton_copy_'s general path: every call of expand_checked."""
    mod, calls = strided_module(), []
    stock = mod.expand_checked

    def counting(*args, **kwargs):
        calls.append(args[0].shape)
        return stock(*args, **kwargs)

    monkeypatch.setattr(mod, "expand_checked", counting)
    return calls


PLAIN_CASES = {  # (layout, neg): one dtype, same neg bit, src of dst's shape, dst contiguous
    "contiguous": ("contiguous", ""),
    "transposed": ("transpose", ""),
    "sdpa_mask": ("sdpa_mask", ""),
    "expand_row": ("expand_row", ""),
    "step_slice": ("step_slice", ""),
    "permute4d": ("permute4d", ""),
    "both_negated": ("transpose", "both"),
}
GENERAL_CASES = {  # each lacks one of the above
    "negated_src": ("transpose", "src"),
    "negated_dst": ("contiguous", "dst"),
    "broadcast": ("broadcast", ""),
    "scalar_0d": ("scalar_0d", ""),
    "dst_transposed": ("dst_transposed", ""),
    "dst_step_slice": ("dst_step_slice", ""),
}
