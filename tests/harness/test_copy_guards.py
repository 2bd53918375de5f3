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

"""KunlunXIN copy_ / copy: strided layouts through the Triton kernel, torch's semantics.

Every reference is computed by torch on the CPU from the same values, and tensors
reach the device only as contiguous buffers: on KunlunXIN torch's own strided
copy is the kernel that fails, so it cannot serve as the reference there.
"""

import contextlib
import os
import sys
import threading
import types
import warnings
from unittest import mock

import pytest
import torch
import triton

import flag_gems

try:
    import hypothesis
except ImportError:  # the fuzz test is skipped, the rest still runs
    hypothesis = None

DEVICE = flag_gems.device
COPY_MODULE = "_kunlunxin.ops.copy"

pytestmark = pytest.mark.skipif(
    flag_gems.vendor_name != "kunlunxin", reason="tests the KunlunXIN copy_"
)

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


def _same(t):
    return t


# name: (src base shape, src view, dst base shape, dst view, rank after coalescing)
LAYOUTS = {
    "contiguous": ((64, 33), _same, (64, 33), _same, 1),
    "expand_row": ((128,), lambda s: s.expand(4, 128), (4, 128), _same, 2),
    "sdpa_mask": (
        (2, 1, 1, 16),
        lambda s: s.expand(2, 4, 16, 16),
        (2, 4, 16, 16),
        _same,
        3,
    ),
    "broadcast": ((33,), _same, (8, 33), _same, 2),
    "scalar_0d": ((), _same, (5, 7), _same, 1),
    "transpose": ((33, 64), lambda s: s.t(), (64, 33), _same, 2),
    "both_transposed": ((33, 64), lambda s: s.t(), (33, 64), lambda d: d.t(), 1),
    "step_slice": ((40, 60), lambda s: s[::2, 1::3], (20, 20), _same, 2),
    "permute4d": (
        (3, 4, 5, 6),
        lambda s: s.permute(2, 0, 3, 1),
        (5, 3, 6, 4),
        _same,
        4,
    ),
    "transpose4d_inner": (
        (2, 3, 4, 5),
        lambda s: s.transpose(2, 3),
        (2, 3, 5, 4),
        _same,
        3,
    ),
    "composite": (
        (10, 12, 14),
        lambda s: s.permute(2, 0, 1)[1:, ::2, 3:9].unsqueeze(1).expand(13, 3, 5, 6),
        (13, 3, 5, 6),
        _same,
        4,
    ),
    "dst_transposed": ((33, 64), _same, (64, 33), lambda d: d.t(), 2),
    "dst_step_slice": ((40, 16), lambda s: s.t(), (16, 80), lambda d: d[:, ::2], 2),
    "size1_dims": (
        (7, 9),
        lambda s: s.t().unsqueeze(0).unsqueeze(2),
        (1, 9, 1, 7),
        _same,
        2,
    ),
    "rank8": (
        (2, 3, 2, 3, 2, 3, 2, 3),
        lambda s: s.permute(7, 6, 5, 4, 3, 2, 1, 0),
        (3, 2, 3, 2, 3, 2, 3, 2),
        _same,
        8,
    ),
}


def copy_module():
    """The module flag_gems dispatches copy_ to (not a second import of it)."""
    return sys.modules[COPY_MODULE]


def c_defined(src, target):
    """Where converting `src` to `target` is defined (bool mask): THE exclusion rule.

    torch converts with C++ casts, so only what C leaves undefined is excluded: a float
    to integer (not bool) conversion of NaN, +-inf, or of a value whose truncation is
    outside the range of the integer type torch casts to (int64 for uint8: c10 casts
    float -> int64 -> uint8; the target otherwise). Nothing else is excluded.
    NaN results are compared by position only (assert_bit_exact with exact_nans=False
    across dtypes): IEEE 754 leaves a converted NaN's payload and sign to the
    implementation, and torch's own CPU paths disagree on it.
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


class Case:
    """One copy: CPU originals for the reference, device buffers for flag_gems."""

    def __init__(self, layout, src_dtype, dst_dtype, seed=0):
        src_shape, self.src_view, dst_shape, self.dst_view, self.rank = LAYOUTS[layout]
        gen = torch.Generator().manual_seed(seed)
        self.name = f"{layout}-{SHORT[src_dtype]}->{SHORT[dst_dtype]}"
        self.src_base = make_values(src_shape, src_dtype, dst_dtype, gen)
        self.dst_base = make_values(dst_shape, dst_dtype, dst_dtype, gen)
        self.dev_dst_base = self.dst_base.to(DEVICE, copy=True)
        self.src = self.src_view(self.src_base.to(DEVICE, copy=True))
        self.dst = self.dst_view(self.dev_dst_base)
        self.exact_nans = src_dtype == dst_dtype

    def reference(self):
        ref = self.dst_base.clone()
        self.dst_view(ref).copy_(self.src_view(self.src_base))
        return ref

    def check(self):
        assert_bit_exact(
            self.dev_dst_base, self.reference(), self.name, self.exact_nans
        )


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
        as_int = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
        bits = as_int[res.element_size()]
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


class Paths:
    def __init__(self):
        self.ranks = []  # one entry per Triton kernel launch: the kernel's rank
        self.fallbacks = 0  # aten copy_ redispatches
        self.lookups = []  # the launch keys copy_ looked up


@contextlib.contextmanager
def track_paths():
    """Count Triton launches (with their rank) and aten fallbacks of copy_.

    A launch is counted where copy_ picks the generated wrapper of a rank and, on
    its fast path, where it replays a recorded launch.
    """
    mod, paths = copy_module(), Paths()
    redispatch = torch.ops.aten.copy_.default.redispatch
    kernels = (
        mod._copy_kernel,
        mod._copy_to_bool_kernel,
        mod._copy_int_to_bf16_kernel,
        mod._copy_via_int64_kernel,
    )

    def counting(instantiate):
        def counting_instantiate(rank):
            paths.ranks.append(rank)
            return instantiate(rank)

        return counting_instantiate

    def counting_redispatch(*args, **kwargs):
        paths.fallbacks += 1
        return redispatch(*args, **kwargs)

    class CountedLaunches(dict):  # copy_'s recorded launches, replays counted
        def get(self, key, default=None):
            paths.lookups.append(key)
            launch = super().get(key, default)
            if launch is None:
                return launch
            runner, args, wrapper, *spans = launch
            (rank,) = [
                n for k in kernels for n, w in k.overloads.items() if w is wrapper
            ]

            def counted_runner(*args):
                runner(*args)
                paths.ranks.append(rank)

            return counted_runner, args, wrapper, *spans

    launches = CountedLaunches(mod._launches)

    def keep_records(recorded=mod._launches):
        recorded.clear()
        recorded.update(launches)

    with contextlib.ExitStack() as stack:
        stack.callback(keep_records)
        for kernel in kernels:
            stack.enter_context(
                mock.patch.object(kernel, "instantiate", counting(kernel.instantiate))
            )
        stack.enter_context(
            mock.patch.object(
                torch.ops.aten.copy_.default, "redispatch", counting_redispatch
            )
        )
        stack.enter_context(mock.patch.object(mod, "_launches", launches))
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
    assert paths.ranks == [case.rank], f"{case.name}: launches/ranks {paths.ranks}"
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
        with track_paths() as paths:
            gems_copy_(dst_view(dev_dst_base), src)
        assert paths.fallbacks == 0 and paths.ranks == [1], what
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
    assert paths.fallbacks == 0 and paths.ranks == [case.rank], case.name
    case.check()


@pytest.mark.copy
@pytest.mark.parametrize("layout", ["transpose", "sdpa_mask", "dst_step_slice"])
def test_copy_functional(layout):
    case = Case(layout, torch.float32, torch.bfloat16, seed=2)
    with track_paths() as paths:
        out = copy_module().copy(case.dst, case.src)
    assert paths.fallbacks == 0 and len(paths.ranks) == 1
    assert out.shape == case.dst.shape and out.stride() == case.dst.stride()
    assert out.data_ptr() != case.dst.data_ptr()
    expected = case.dst_view(case.reference())
    assert_bit_exact(out, expected, case.name, exact_nans=False)


@pytest.mark.copy
def test_copy_functional_overlapping_template():
    # aten::copy clones a template with internal overlap densely
    template = torch.zeros(3, device=DEVICE).expand(2, 3)
    src = torch.arange(6.0).view(2, 3)
    out = copy_module().copy(template, src.to(DEVICE))
    assert out.is_contiguous()
    assert_bit_exact(out, src, "expanded template")


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

    def src_view(t):  # reversed permutation: no two dims can merge
        return t.permute(*reversed(range(rank)))

    def dst_view(t):  # every other element of the innermost dim
        return t[..., ::2]

    dev_dst_base = dst_base.to(DEVICE, copy=True)
    with track_paths() as paths:
        gems_copy_(dst_view(dev_dst_base), src_view(src_base.to(DEVICE, copy=True)))
    assert paths.fallbacks == 0 and paths.ranks == [rank]
    ref = dst_base.clone()
    dst_view(ref).copy_(src_view(src_base))
    assert_bit_exact(dev_dst_base, ref, f"rank{rank}", pair[0] == pair[1])


@pytest.mark.copy_
@pytest.mark.parametrize(
    "shape, dst_strides, src_strides, expected",
    [
        # contiguous
        ((4, 5, 6), (30, 6, 1), (30, 6, 1), ((120,), (1,), (1,))),
        # SDPA mask (B,1,1,S) -> (B,H,S,S): H and the query dim merge
        (
            (2, 8, 16, 16),
            (2048, 256, 16, 1),
            (16, 0, 0, 1),
            ((2, 128, 16), (2048, 16, 1), (16, 0, 1)),
        ),
        # contiguous source into a transposed destination: destination order wins
        ((4, 5), (1, 4), (5, 1), ((5, 4), (4, 1), (1, 5))),
        # size-1 dims vanish
        ((1, 3, 1, 2), (6, 2, 2, 1), (99, 2, 7, 1), ((6,), (1,), (1,))),
        # one element
        ((1, 1), (1, 1), (5, 3), ((1,), (1,), (1,))),
        # broadcast source (stride 0) merges with stride-0 neighbours
        ((3, 4, 5), (20, 5, 1), (0, 0, 0), ((60,), (1,), (0,))),
    ],
)
def test_coalesce(shape, dst_strides, src_strides, expected):
    assert copy_module()._coalesce(shape, dst_strides, src_strides) == expected


@pytest.mark.copy_
@pytest.mark.parametrize(
    "shape, dst_strides, src_strides, expected",
    [
        # equal destination strides (an as_strided window view): the smaller dim
        # goes inner, as TensorIterator orders it
        ((2, 3), (1, 1), (3, 1), ((3, 2), (1, 1), (1, 3))),
        # a broadcast source dim (stride 0) does not break the destination's tie
        ((4, 2, 3), (1, 1, 4), (0, 1, 2), ((3, 4, 2), (4, 1, 1), (2, 0, 1))),
        (
            (4, 2, 2, 3),
            (2, 2, 1, 2),
            (1, 3, 3, 0),
            ((2, 3, 4, 2), (2, 2, 2, 1), (3, 0, 1, 3)),
        ),
        # a tie that only a later dim resolves: the sort keeps scanning past it
        ((4, 2, 4), (4, 4, 4), (2, 4, 1), ((4, 4, 2), (4, 4, 4), (2, 1, 4))),
    ],
)
def test_coalesce_ties_follow_tensoriterator(shape, dst_strides, src_strides, expected):
    assert copy_module()._coalesce(shape, dst_strides, src_strides) == expected


# ---------------------------------------------------------------------------
# same-rank broadcasts: a size-1 source dim with a real (nonzero) stride
# ---------------------------------------------------------------------------

# name: (src base shape, src view, dst base shape, dst view, rank after coalescing)
SAME_RANK_BROADCASTS = {
    # a (1, C) bias row into (N, C): the most common broadcast there is
    "row_1xC": ((1, 33), _same, (8, 33), _same, 2),
    "row_into_two_rows": ((1, 33), _same, (2, 33), _same, 2),
    "first_row": ((5, 33), lambda s: s[:1], (8, 33), _same, 2),
    "row_into_transposed": ((1, 33), _same, (33, 8), lambda d: d.t(), 2),
    "row_into_step_slice": ((5, 33), lambda s: s[3:4], (8, 66), lambda d: d[:, ::2], 2),
    # a middle dim: (B, 1, S) sliced out of a bigger tensor, into (B, H, S)
    "middle_dim": ((3, 4, 10), lambda s: s[:, 1:2, ::2], (3, 6, 5), _same, 3),
    "outer_and_inner": ((1, 7, 1), _same, (4, 7, 3), _same, 3),
    "one_element_1x1": ((5, 6), lambda s: s[2:3, 4:5], (3, 4), _same, 1),
    "0d_view": ((6,), lambda s: s[4], (5, 7), _same, 1),
    "0d_into_0d": ((6,), lambda s: s[4], (3,), lambda d: d[2], 1),
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
    src_shape, src_view, dst_shape, dst_view, rank = SAME_RANK_BROADCASTS[layout]
    gen = torch.Generator().manual_seed(11)
    src_base = make_values(src_shape, pair[0], pair[1], gen)
    dst_base = make_values(dst_shape, pair[1], pair[1], gen)
    dev_dst_base = dst_base.to(DEVICE, copy=True)
    src = src_view(src_base.to(DEVICE, copy=True))
    assert src.dim() in (0, dst_view(dst_base).dim())
    with track_paths() as paths:
        gems_copy_(dst_view(dev_dst_base), src)
    name = f"{layout}-{_pair_id(pair)}"
    assert paths.fallbacks == 0 and paths.ranks == [rank], f"{name}: {paths.ranks}"
    ref = dst_base.clone()
    dst_view(ref).copy_(src_view(src_base))
    assert_bit_exact(dev_dst_base, ref, name, pair[0] == pair[1])


@pytest.mark.copy_
def test_copy_same_rank_broadcast_functional():
    # copy(template, x[:1]): the functional form broadcasts the same way
    src = torch.randn(4, 16)
    template = torch.empty(6, 16, device=DEVICE)
    out = copy_module().copy(template, src.to(DEVICE)[:1])
    assert_bit_exact(out, src[:1].expand(6, 16).contiguous(), "copy(template, x[:1])")


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
    assert paths.fallbacks == 0 and paths.ranks == [1]
    assert_bit_exact(dst, src[0], "a row of an expanded destination")


@pytest.mark.copy
def test_copy_functional_keyword_arguments():
    # copy(template, src=..., non_blocking=...): torch's argument names work
    src = torch.randn(3, 5)
    template = torch.empty(5, 3, device=DEVICE).t()
    out = copy_module().copy(template, src=src.to(DEVICE), non_blocking=False)
    assert out.stride() == template.stride()
    assert_bit_exact(out, src, "keywords")


@pytest.mark.copy_
def test_plan_int32_bounds():
    # One launch while every element offset fits int32 (<= 2**31 - 1) and the 12
    # CTAs' power-of-two tiles do too (numel <= 12 * 2**27); one past either bound
    # must split. Plans are computed from sizes and strides, nothing is allocated.
    plan = copy_module()._plan
    big = 12 * 2**27
    assert plan((big,), (1,), (1,))[3:] == (big, True)
    assert plan((big + 1,), (1,), (1,))[3:] == (big + 1, False)
    last = 2**31 - 1  # the largest offset int32 can index
    assert plan((2, 3), (last, 1), (3, 1))[4] is False  # dst offset last + 2
    assert plan((2, 3), (last - 2, 1), (3, 1))[4] is True  # dst offset exactly last
    assert plan((2, 3), (3, 1), (last - 2, 1))[4] is True
    assert plan((2, 3), (3, 1), (last - 1, 1))[4] is False  # src offset last + 1
    # a broadcast source (stride 0) adds no offset, however large the dst dim
    assert plan((3, 2**20), (2**20, 1), (0, 1)) == (
        (3, 2**20),
        (2**20, 1),
        (0, 1),
        3 * 2**20,
        True,
    )


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
    assert paths.ranks == [] and paths.fallbacks == 0
    assert bool((dst.cpu() == 7.0).all()), "destination was written before the error"


def _overlap_cases():
    def internal(x):
        return x[0].expand(4, 4), torch.ones(4, 4, device=x.device)

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

    return {
        "internal": internal,
        "transpose": transpose,
        "shifted": shifted,
        "element_inside": element_inside,
        "transpose_back": transpose_back,
        "element_in_wider_element": element_in_wider_element,
        "empty_source_inside": empty_source_inside,
        "shifted_back": shifted_back,
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
    assert paths.ranks == [] and paths.fallbacks == 0
    assert_bit_exact(x, cpu, f"{kind}: destination untouched")


@pytest.mark.copy_
def test_copy_alias_empty_destination_inside_a_source_element():
    # an empty int16 view pointing into the int32 it aliases: no bytes, no overlap,
    # nothing to do
    cpu = torch.arange(16.0)
    x = cpu.to(DEVICE, copy=True)
    with track_paths() as paths:
        gems_copy_(x.view(torch.int16)[1:1], x.view(torch.int32)[:1])
    assert paths.ranks == [] and paths.fallbacks == 0
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
    src = torch._neg_view(torch.randn(3, 4, device=DEVICE))
    copy_module().copy_(torch.zeros(3, 4, device=DEVICE), src)
    copy_module().copy_(torch.zeros(3, 4, device=DEVICE), src, True)
    copy_module().copy(torch.zeros(3, 4, device=DEVICE), src)  # functional copy
    copy_module().copy(torch.zeros(3, 4, device=DEVICE), src, non_blocking=True)
    assert seen == [False, True, False, True]


@pytest.mark.copy_
def test_copy_slice_kernel_is_kept():
    # other kunlunxin ops (slice_scatter, select_scatter) import copy_slice from here
    src = torch.randn(4, 6)
    dst = torch.zeros(8, 6, device=DEVICE)
    copy_module().copy_slice(src.to(DEVICE), out0=dst[::2])
    ref = torch.zeros(8, 6)
    ref[::2] = src
    assert_bit_exact(dst, ref, "copy_slice into a step slice")


_ALIAS_WITHOUT_ERROR = {
    # x[:, ::2] <- x[:, 1::2]: one storage, disjoint elements
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
    with track_paths() as paths:
        gems_copy_(*make(x))
    ref = cpu.clone()
    dst, src = make(ref)
    dst.copy_(src)
    assert paths.fallbacks == 0 and len(paths.ranks) >= 1
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
    assert paths.fallbacks == 0 and paths.ranks == [1]  # no snapshot launch
    assert_bit_exact(x, ref, "disjoint halves")


@pytest.mark.copy_
@pytest.mark.parametrize(
    "n, dst_start, src_start, ranks",
    [(9, 4, 0, [1, 1]), (9, 0, 4, [1, 1]), (10, 0, 5, [1]), (10, 5, 0, [1])],
    ids=["one-shared-dst-after", "one-shared-src-after", "touching", "touching-rev"],
)
def test_copy_alias_strided_views_read_first_only_when_sharing(
    n, dst_start, src_start, ranks
):
    # x[a:a+5:2] <- x[b:b+5:2]. Sharing only one element (src's last is dst's first,
    # or the reverse) is still an overlap: src is read whole before anything is
    # written (a snapshot launch, then the copy). One view starting right after the
    # other's last element is no overlap: one launch.
    cpu = torch.randn(n)
    x = cpu.to(DEVICE, copy=True)
    with track_paths() as paths:
        gems_copy_(x[dst_start : dst_start + 5 : 2], x[src_start : src_start + 5 : 2])
    ref = cpu.clone()
    ref[dst_start : dst_start + 5 : 2] = cpu[src_start : src_start + 5 : 2].clone()
    assert paths.fallbacks == 0 and paths.ranks == ranks
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
    assert paths.fallbacks == 0 and len(paths.ranks) == 2  # snapshot, then copy
    assert_bit_exact(x, ref, "shifted alias")


@pytest.mark.copy_
def test_copy_self_alias_is_noop():
    x = torch.randn(4, 6, device=DEVICE).t()
    before = x.clone()
    with track_paths() as paths:
        gems_copy_(x, x)
        gems_copy_(x, x[:])  # another view with identical metadata
    assert paths.ranks == [] and paths.fallbacks == 0
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
    assert paths.fallbacks == 0 and paths.ranks == [1]
    assert_bit_exact(x, ref, "int32 view of itself")


@pytest.mark.copy_
def test_copy_empty():
    with track_paths() as paths:
        gems_copy_(torch.empty(0, 3, device=DEVICE), torch.ones(3, device=DEVICE))
        gems_copy_(
            torch.empty(3, 0, device=DEVICE).t(),
            torch.empty(3, device=DEVICE).expand(0, 3),
        )
    assert paths.ranks == [] and paths.fallbacks == 0


@pytest.mark.copy_
def test_copy_zero_dim():
    dst = torch.zeros((), device=DEVICE)
    with track_paths() as paths:
        gems_copy_(dst, torch.tensor(2.5, device=DEVICE))
        gems_copy_(torch.empty(3, device=DEVICE)[1], torch.tensor(1.0, device=DEVICE))
    assert paths.fallbacks == 0 and paths.ranks == [1, 1]
    assert dst.item() == 2.5


@pytest.mark.copy_
def test_copy_zero_tensors():
    z = torch._efficientzerotensor(3, device=DEVICE)
    expected = torch_error(lambda: torch._efficientzerotensor(3).copy_(torch.ones(3)))
    with pytest.raises(expected[0]) as err:
        copy_module().copy_(z, torch.ones(3, device=DEVICE))
    assert str(err.value) == expected[1]
    dst = torch.ones(2, 3, device=DEVICE)
    copy_module().copy_(dst, torch._efficientzerotensor(3, device=DEVICE))
    assert bool((dst.cpu() == 0).all())


SCALAR_CASES = [
    (value, dtype)
    for dtype in (torch.float32, torch.bfloat16, torch.int32, torch.bool)
    for value in (3.7, -2, True, 1e10, 2.0**-140, 1.00390625)
    if not (dtype is torch.int32 and value == 1e10)  # overflow: undefined in C++
]


@pytest.mark.copy_
@pytest.mark.parametrize("value, dtype", SCALAR_CASES, ids=lambda x: str(x))
def test_copy_python_scalar(value, dtype):
    ref = torch.zeros(2, 3, dtype=dtype)
    ref.copy_(value)  # torch wraps the number as a float64/int64/bool tensor
    dst = torch.zeros(2, 3, dtype=dtype, device=DEVICE).t()
    with track_paths() as paths:
        copy_module().copy_(dst, value)
    assert paths.fallbacks == 0 and len(paths.ranks) == 1
    assert_bit_exact(dst.t(), ref, f"scalar {value!r}")


# Python numbers that float32 cannot hold: torch wraps a float as float64 and an
# int as int64, so a count like 2**24 + 1 or a tiny flag like 1e-50 survives.
SCALAR_ROUNDING_CASES = [
    (2.0**24 + 1, torch.int32),
    (-(2.0**40) - 1, torch.int64),
    (1e-50, torch.bool),
    (1e-40, torch.float32),
    (2**53 + 1, torch.int64),
    (-(2**62) - 1, torch.int64),
]


@pytest.mark.copy_
@pytest.mark.parametrize("value, dtype", SCALAR_ROUNDING_CASES, ids=lambda x: str(x))
def test_copy_python_scalar_rounds_once(value, dtype):
    ref = torch.zeros(3, 4, dtype=dtype)
    ref.copy_(value)
    dst = torch.zeros(4, 6, dtype=dtype, device=DEVICE)[:, ::2].t()
    with track_paths() as paths:
        copy_module().copy_(dst, value)
    assert paths.fallbacks == 0 and len(paths.ranks) == 1
    assert_bit_exact(dst, ref, f"scalar {value!r} -> {dtype}")


@pytest.mark.copy_
def test_copy_python_scalar_rejects_other_types():
    with pytest.raises(TypeError):
        copy_module().copy_(torch.zeros(3, device=DEVICE), [1, 2, 3])


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
    assert paths.fallbacks == 1 and paths.ranks == []
    assert any("discards the imaginary part" in str(w.message) for w in caught)
    assert_bit_exact(dst, src.real.contiguous(), "complex->real")


@pytest.mark.copy_
def test_copy_fallback_dtypes():
    # float64 is disabled by the KunlunXIN descriptor; float8_e8m0fnu has no Triton type
    cases = [(torch.float64, torch.float64), (torch.float32, torch.float64)]
    if hasattr(torch, "float8_e8m0fnu"):
        cases.append((torch.float8_e8m0fnu, torch.float32))
    for src_dtype, dst_dtype in cases:
        src = (torch.rand(3, 5) * 8).to(src_dtype)
        dst = torch.zeros(3, 5, dtype=dst_dtype, device=DEVICE)
        with track_paths() as paths:
            gems_copy_(dst, src.to(DEVICE))
        expect_fallback = not (
            flag_gems.runtime.device.support_fp64
            and src_dtype is not torch.float8_e8m0fnu
        )
        assert (paths.fallbacks, len(paths.ranks)) == (
            (1, 0) if expect_fallback else (0, 1)
        )
        assert_bit_exact(dst, src.to(dst_dtype), f"{src_dtype}->{dst_dtype}")


@pytest.mark.copy_
def test_copy_fallback_reasons_name_the_cause():
    # the debug line of every fallback says why, so a slow path can be traced
    reason = copy_module()._fallback_reason
    x = torch.zeros(2, 3, device=DEVICE)
    assert reason(x, torch.zeros(2, 3, device=DEVICE)) is None
    if not flag_gems.runtime.device.support_fp64:
        f64 = torch.zeros(2, 3, dtype=torch.float64, device=DEVICE)
        assert (
            reason(x, f64)
            == "dtype torch.float64->torch.float32 not supported by Triton here"
        )
    c64 = torch.zeros(2, 3, dtype=torch.complex64, device=DEVICE)
    assert reason(x, c64).startswith("complex dtype")
    assert reason(x, torch._neg_view(x)) == "lazy negation bit"
    assert reason(x, torch.zeros(2, 3, device="meta")) == "cross-device or meta copy"
    q = torch.quantize_per_tensor(torch.zeros(2, 3), 0.1, 0, torch.qint8)
    assert reason(q, q) == "quantized tensor"
    assert reason(q, torch.zeros(2, 3)) == "quantized tensor"  # quantizing copy
    assert reason(x, torch.eye(3).to_sparse()) == "non-strided layout"


@pytest.mark.copy_
def test_copy_neg_view_goes_to_fallback():
    # a lazy negation bit must be materialised, which the raw copy kernel would not do
    src = torch.randn(3, 4)
    dst = torch.zeros(3, 4, device=DEVICE)
    with track_paths() as paths:
        copy_module().copy_(dst, torch._neg_view(src.to(DEVICE)))
    assert paths.fallbacks == 1 and paths.ranks == []
    assert_bit_exact(dst, -src, "neg view")


@pytest.mark.copy_
def test_copy_quantized_and_sparse_go_to_fallback():
    mod = copy_module()
    q = torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8)
    dst_q = torch.quantize_per_tensor(torch.zeros(4), 0.1, 0, torch.qint8)
    sparse = torch.eye(3).to_sparse()
    expected = torch_error(lambda: torch.zeros(3, 3).copy_(sparse))
    with track_paths() as paths:
        mod.copy_(dst_q, q)
        with pytest.raises(expected[0]) as err:
            mod.copy_(torch.zeros(3, 3), sparse)
    assert str(err.value) == expected[1]
    assert paths.fallbacks == 1 and paths.ranks == []  # + sparse: dispatched by layout
    assert torch.equal(dst_q.int_repr(), q.int_repr())


@pytest.mark.copy_
def test_copy_cross_device_goes_to_fallback():
    src = torch.empty(3, 4, device="meta")
    expected = torch_error(lambda: torch.zeros(3, 4).copy_(src))
    dst = torch.zeros(3, 4, device=DEVICE)
    with track_paths() as paths, pytest.raises(expected[0]) as err:
        copy_module().copy_(dst, src)
    assert str(err.value) == expected[1]
    assert paths.fallbacks == 1 and paths.ranks == []
    if DEVICE != "cpu":  # host -> device, contiguous: the runtime's memcpy
        cpu_src = torch.randn(3, 4)
        with track_paths() as paths:
            copy_module().copy_(dst, cpu_src)
        assert paths.fallbacks == 1
        assert_bit_exact(dst, cpu_src, "host to device")


@pytest.mark.copy_
def test_copy_splits_what_int32_cannot_index(monkeypatch, request):
    # Shrink the per-launch bounds so the split path runs on small tensors.
    mod = copy_module()
    monkeypatch.setattr(mod, "_MAX_NUMEL", 300)
    monkeypatch.setattr(mod, "_MAX_OFFSET", 1000)
    caches = (mod._layout, mod._plan)  # plans remember whether they fit one launch
    for cache in caches:
        cache.cache_clear()
        request.addfinalizer(cache.cache_clear)
    monkeypatch.setattr(mod, "_launches", {})  # and so do recorded launches
    case = Case("transpose", torch.float32, torch.bfloat16, seed=3)
    with track_paths() as paths:
        gems_copy_(case.dst, case.src)
    assert paths.fallbacks == 0 and len(paths.ranks) > 2
    case.check()
    case = Case("dst_step_slice", torch.int64, torch.int64, seed=4)
    with track_paths() as paths:
        gems_copy_(case.dst, case.src)
    assert paths.fallbacks == 0 and len(paths.ranks) > 2
    case.check()


@contextlib.contextmanager
def count_libentry_runs():
    """Count LibEntry.run calls: the generated wrapper's launches (fast ones skip it)."""
    from flag_gems.utils.libentry import LibEntry

    with mock.patch.object(
        LibEntry, "run", autospec=True, side_effect=LibEntry.run
    ) as run:
        yield run


@pytest.mark.copy_
def test_copy_fast_launch_replays_what_libentry_launched(request):
    # The first copy of a layout goes through the generated wrapper and LibEntry;
    # later copies of that layout launch LibEntry's cached kernel directly.
    mod = copy_module()
    mod._launches.clear()
    request.addfinalizer(mod._launches.clear)
    with count_libentry_runs() as run:
        for seed in range(3):
            case = Case("permute4d", torch.float32, torch.bfloat16, seed=seed)
            with track_paths() as paths:
                gems_copy_(case.dst, case.src)
            assert paths.ranks == [LAYOUTS["permute4d"][4]] and paths.fallbacks == 0
            case.check()
        assert run.call_count == 1
        assert sum(v is not None for v in mod._launches.values()) == 1
        # the same layout from a source or into a destination 4 bytes off 16-byte
        # alignment: LibEntry compiles per alignment, so each is a layout of its own
        src_base = torch.randn(8 * 6 + 1, device=DEVICE)
        dst_base = torch.empty(6 * 8 + 1, device=DEVICE)
        calls = []
        for src_off, dst_off in [(0, 0), (0, 0), (1, 0), (1, 0), (0, 1), (0, 1)]:
            src = src_base[src_off : src_off + 48].view(8, 6).t()
            dst = dst_base[dst_off : dst_off + 48].view(6, 8)
            before = run.call_count
            gems_copy_(dst, src)
            calls.append(run.call_count - before)
            assert_bit_exact(dst, host_view(src).contiguous(), f"{src_off} {dst_off}")
        assert calls == [1, 0, 1, 0, 1, 0]
        # earlier layouts stay cached while others are added
        before = run.call_count
        gems_copy_(dst_base[:48].view(6, 8), src_base[:48].view(8, 6).t())
        assert run.call_count == before


_ALIASING = (
    "partial_overlap",
    "one_element_shared_src_first",
    "one_element_shared_dst_first",
    "overlapping_views",
    "self_view",
    "adjacent_halves",
    "adjacent_halves_dst_first",
    "bytes_shared_across_dtypes",
    "adjacent_across_dtypes",
)
_DISJOINT = ("adjacent_halves", "adjacent_halves_dst_first", "adjacent_across_dtypes")


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
    if variant == "overlapping_views":  # not dense: torch reads every element first
        return dst_buf.view(4, 4)[1:, :3], src_buf.view(4, 4)[:3, 1:]
    if variant == "self_view":
        return dst_buf.view(4, 4).t(), src_buf.view(4, 4).t()
    if variant in ("src_zero", "dst_zero"):  # the layout of a ZeroTensor
        return dst_buf.view(4, 4), src_buf.view(4, 4)
    return dst_buf.view(4, 4), src_buf.view(4, 4).t()


def _variant(variant, buf, src_buf):
    dst, src = _views(variant, buf, buf if variant in _ALIASING else src_buf)
    if variant == "src_neg":
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
@pytest.mark.parametrize(
    "variant", ["src_neg", "dst_neg", "src_zero", "dst_zero", "src_meta", *_ALIASING]
)
def test_copy_fast_path_checks_what_its_key_leaves_out(request, variant):
    # A recorded launch key stands for checks passed by its dtypes, devices, shapes,
    # strides and alignment. A later copy of that layout with a negation bit, a zero
    # tensor, a source elsewhere or a source aliasing the destination still gets
    # torch's result or error (the destination untouched), not the recorded launch.
    mod = copy_module()
    mod._launches.clear()
    request.addfinalizer(mod._launches.clear)
    cpu = torch.arange(16, dtype=torch.float32) - 5
    plain = _views(variant, torch.zeros(16, device=DEVICE), cpu.to(DEVICE))
    gems_copy_(*plain)
    ((key, launch),) = mod._launches.items()
    assert launch is not None
    aliasing = variant in _ALIASING
    buf = cpu.to(DEVICE, copy=True) if aliasing else torch.zeros(16, device=DEVICE)
    ref_buf = cpu.clone() if aliasing else torch.zeros(16)
    dst, src = _variant(variant, buf, cpu.to(DEVICE))
    ref_dst, ref_src = _variant(variant, ref_buf, cpu)
    if variant == "overlapping_views":  # every element reads its old value
        ref_src = ref_src.clone()
    before = buf.cpu()
    try:
        ref_dst.copy_(ref_src)
        error = None
    except Exception as exc:  # noqa: BLE001 - we compare whatever torch raises
        error = exc
    with track_paths() as paths, count_libentry_runs() as run:
        if error is None:
            assert mod.copy_(dst, src) is dst
        else:
            with pytest.raises(type(error)) as err:
                mod.copy_(dst, src)
    # each variant but src_meta looks up the recorded key; only a copy whose bytes
    # are disjoint replays its launch, and no replay failed (that drops the record)
    if variant == "src_meta":
        assert len(paths.lookups) == 1 and paths.lookups[0] != key
    else:
        assert paths.lookups == [key]
    assert mod._launches[key] is launch
    assert run.call_count == (variant == "overlapping_views") * 2
    if error is None:
        assert_bit_exact(buf, ref_buf, variant)
    else:
        assert str(err.value) == str(error)
        assert_bit_exact(buf, before, f"{variant}: destination untouched")
    fallbacks = variant in ("src_neg", "dst_neg", "src_meta")
    assert paths.fallbacks == fallbacks
    assert bool(paths.ranks) == (variant in ("overlapping_views", *_DISJOINT))


@pytest.mark.copy_
@pytest.mark.parametrize("other", [1, -1])
def test_copy_on_another_device_takes_the_wrapper(monkeypatch, request, other):
    # LibEntry caches kernels per current device, and a cached kernel launches on the
    # current device: a copy whose tensors live elsewhere goes through the wrapper
    # (which enters their device), every time, and is never recorded.
    mod = copy_module()
    mod._launches.clear()
    request.addfinalizer(mod._launches.clear)
    src = torch.randn(5, 6, device=DEVICE)
    dst = torch.empty(6, 5, device=DEVICE)
    elsewhere = types.SimpleNamespace(current_device=lambda: dst.get_device() + other)
    # a wrapper generated now takes copy.py's globals, the real torch_device_fn
    # among them; one generated under the patch would keep the stand-in for good
    mod._copy_kernel.instantiate(2)
    monkeypatch.setattr(mod, "torch_device_fn", elsewhere)
    with count_libentry_runs() as run:
        for _ in range(2):
            gems_copy_(dst, src.t())
            assert_bit_exact(dst, host_view(src).t().contiguous(), "elsewhere")
    assert run.call_count == 2 and not mod._launches


@pytest.mark.copy_
@pytest.mark.parametrize(
    "wrapper_kind",
    ["no_libentry", "no_libentry_launch", "two_launches", "other_src", "other_dst"],
)
def test_copy_fast_launch_records_only_the_copys_own_launch(wrapper_kind):
    # Only one LibEntry launch of the copy's own tensors is recorded: a wrapper without
    # a LibEntry, one that launches nothing through it, or one that hands the kernel
    # other tensors (which a replay would then bypass) is launched and not recorded.
    mod = copy_module()
    generated = mod._copy_kernel.instantiate(2)
    src = torch.randn(3, 4, device=DEVICE)
    dst = torch.empty(3, 4, device=DEVICE)

    def in_generated_module(fn):  # the same function, with the generated globals
        globals_ = generated.__globals__
        return types.FunctionType(fn.__code__, globals_, None, None, fn.__closure__)

    wrappers = {
        "no_libentry": lambda s, out0: generated(s, out0=out0),
        "no_libentry_launch": in_generated_module(lambda s, out0: out0.fill_(0)),
        "two_launches": in_generated_module(
            lambda s, out0: [generated(s, out0=out0) for _ in range(2)]
        ),
        "other_src": in_generated_module(
            lambda s, out0: generated(s.clone(), out0=out0)
        ),
        "other_dst": in_generated_module(
            lambda s, out0: generated(s, out0=out0.view(out0.shape))
        ),
    }
    assert mod._launch_and_record(wrappers[wrapper_kind], src, dst) is None


@pytest.mark.copy_
def test_copy_fast_launch_cache_is_bounded(monkeypatch, request):
    mod = copy_module()
    mod._launches.clear()
    request.addfinalizer(mod._launches.clear)
    monkeypatch.setattr(mod, "_MAX_LAUNCHES", 3)
    for n in range(2, 8):  # six layouts
        src = torch.randn(n, 5, device=DEVICE)
        dst = torch.empty(5, n, device=DEVICE)
        gems_copy_(dst, src.t())
        assert_bit_exact(dst, host_view(src).t().contiguous(), f"n={n}")
        assert 1 <= len(mod._launches) <= 3


@pytest.mark.copy_
@pytest.mark.parametrize("recorder_ident", [min, max])
def test_copy_fast_launch_records_only_its_own_thread(
    monkeypatch, request, recorder_ident
):
    # While one thread records its first copy of a layout, another thread launches the
    # same kernel through the wrapper; that launch is not taken for the recorded one.
    # (The recorder is the thread with the smaller, or the larger, ident.)
    mod = copy_module()
    mod._launches.clear()
    request.addfinalizer(mod._launches.clear)
    src = torch.randn(7, 3, device=DEVICE)
    dst = torch.empty(3, 7, device=DEVICE)
    stock_record = mod._launch_and_record
    go, done, barrier = threading.Event(), threading.Event(), threading.Barrier(2)
    shared, recorded, errors = {}, [], []

    class Intruded:  # the generated wrapper, with the other thread's launch inside
        def __init__(self, wrapper):
            self.__globals__, self.wrapper = wrapper.__globals__, wrapper

        def __call__(self, *args, **kwargs):
            shared["launch"] = lambda: self.wrapper(*args, **kwargs)
            go.set()
            done.wait(60)
            return self.wrapper(*args, **kwargs)

    def record(wrapper, s, d):
        recorded.append(stock_record(Intruded(wrapper), s, d))
        return recorded[-1]

    monkeypatch.setattr(mod, "_launch_and_record", record)

    def thread(name):
        try:
            shared[name] = threading.get_ident()
            barrier.wait(60)
            if shared[name] == recorder_ident(shared["a"], shared["b"]):
                gems_copy_(dst, src.t())
            else:
                go.wait(60)
                shared["launch"]()
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)
        finally:
            go.set()
            done.set()

    threads = [threading.Thread(target=thread, args=(n,)) for n in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert_bit_exact(dst, host_view(src).t().contiguous(), "recorded")
    assert len(recorded) == 1 and recorded[0] is not None


@pytest.mark.copy_
def test_copy_fast_launch_without_constexpr_arguments(monkeypatch, request):
    # On a Triton where LibEntry leaves constexprs out of a cached launch, the record
    # holds exactly the kernel's other parameters.
    mod = copy_module()
    mod._launches.clear()
    request.addfinalizer(mod._launches.clear)
    monkeypatch.setattr(mod, "_LIBENTRY_PASSES_CONSTEXPRS", False)
    src = torch.randn(4, 9, device=DEVICE)
    dst = torch.empty(9, 4, device=DEVICE)
    gems_copy_(dst, src.t())
    assert_bit_exact(dst, host_view(src).t().contiguous(), "recorded")
    (record,) = mod._launches.values()
    entries = [v for v in record[2].__globals__.values() if isinstance(v, mod.LibEntry)]
    params = entries[0].jit_function.params
    assert record is not None
    assert len(record[1]) == sum(not p.is_constexpr for p in params) - 2


@pytest.mark.copy_
def test_copy_fast_launch_calls_the_launch_hooks(request):
    # A profiler's launch hooks see a fast launch as they see LibEntry's own launch
    # of its cached kernel.
    mod = copy_module()
    mod._launches.clear()
    request.addfinalizer(mod._launches.clear)
    hook = mock.Mock()
    triton.knobs.runtime.launch_enter_hook.add(hook)
    request.addfinalizer(lambda: triton.knobs.runtime.launch_enter_hook.remove(hook))
    counts = []
    for seed in range(3):
        if seed == 2:  # the same layout again, through LibEntry's cached launch
            mod._launches.update(dict.fromkeys(mod._launches))
        case = Case("transpose", torch.float16, torch.float32, seed=seed)
        before = hook.call_count
        gems_copy_(case.dst, case.src)
        counts.append(hook.call_count - before)
        case.check()
    fast, libentry_cached = counts[1], counts[2]
    assert fast == libentry_cached >= 1


@pytest.mark.copy_
@pytest.mark.parametrize(
    "version, passes",
    [
        ((3, 3), True),
        ((3, 6), True),
        ((3, 2), False),
        ((3, 7), False),
        ((2, 6), False),
        ((4, 4), False),
    ],
)
def test_copy_fast_launch_takes_libentrys_argument_convention(
    monkeypatch, version, passes
):
    # LibEntry launches a cached kernel with the constexprs among its arguments on
    # Triton 3.3-3.6 and without them elsewhere; the fast launch decides from the same
    # flags of LibEntry's module, so it launches as LibEntry does on any Triton.
    mod = copy_module()
    libentry_module = sys.modules[mod.LibEntry.__module__]
    monkeypatch.setattr(libentry_module, "major_version", version[0])
    monkeypatch.setattr(libentry_module, "minor_version", version[1])
    assert mod._libentry_passes_constexprs() is passes


@pytest.mark.copy_
@pytest.mark.parametrize(
    "failure",
    [
        "unexpected_record",
        "libentry_returns_nothing",
        "libentry_returns_the_kernel_alone",
        "libentry_returns_more",
        "launch_raises",
    ],
)
def test_copy_fast_launch_falls_back_to_the_wrapper(monkeypatch, request, failure):
    # Whatever goes wrong with the recorded launch, the generated wrapper copies.
    mod = copy_module()
    mod._launches.clear()
    request.addfinalizer(mod._launches.clear)
    if failure == "unexpected_record":
        from flag_gems.utils.libentry import LibEntry

        stock = LibEntry.run
        monkeypatch.setattr(LibEntry, "run", lambda *a, **k: (stock(*a, **k), None))
    elif failure == "libentry_returns_nothing":  # a LibEntry whose run returns None
        from flag_gems.utils.libentry import LibEntry

        stock = LibEntry.run
        monkeypatch.setattr(LibEntry, "run", lambda *a, **k: stock(*a, **k) and None)
    elif failure == "libentry_returns_the_kernel_alone":
        from flag_gems.utils.libentry import LibEntry

        stock = LibEntry.run
        monkeypatch.setattr(LibEntry, "run", lambda *a, **k: stock(*a, **k)[:1])
    elif failure == "libentry_returns_more":
        from flag_gems.utils.libentry import LibEntry

        stock = LibEntry.run
        monkeypatch.setattr(LibEntry, "run", lambda *a, **k: stock(*a, **k) + (None,))
    else:
        original = mod._launch_and_record

        def broken_runner(*args, **kwargs):
            raise RuntimeError("launch failed")

        def record(*args):
            recorded = original(*args)
            return None if recorded is None else (broken_runner, *recorded[1:])

        monkeypatch.setattr(mod, "_launch_and_record", record)
    with count_libentry_runs() as run:
        for seed in range(3):
            case = Case("sdpa_mask", torch.float32, torch.float16, seed=seed)
            with track_paths() as paths:
                gems_copy_(case.dst, case.src)
            assert paths.ranks == [3] and paths.fallbacks == 0
            case.check()
        assert run.call_count == 3  # every copy went through the wrapper
    assert list(mod._launches.values()) == [None]


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
    assert paths.fallbacks == 0 and paths.ranks == [3]
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
# property-based fuzz: random shapes, views and dtype pairs
# ---------------------------------------------------------------------------

FUZZ_EXAMPLES = int(os.environ.get("GEMS_COPY_FUZZ_EXAMPLES", "1000"))

if hypothesis is None:

    @pytest.mark.copy_
    @pytest.mark.skip(reason="hypothesis is not installed")
    def test_copy_fuzz():
        pass

else:
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

        def view(base):
            t = base.permute(sorted(range(len(perm)), key=lambda i: perm[i]))
            index = tuple(
                slice(start, start + 1) if b else slice(start, start + n * step, step)
                for n, (b, step, start) in zip(kept_shape, kept)
            )
            return t[index] if implicit else t[index].expand(kept_shape)

        spec = f"base{tuple(base_shape[p] for p in perm)}.permute(inv{tuple(perm)})[{kept}] over {shape}"
        spec += " (broadcast by copy_)" if implicit else ""
        return [base_shape[p] for p in perm], view, spec

    @st.composite
    def copy_problems(draw):
        rank = draw(st.integers(0, 6))
        shape = tuple(
            draw(st.sampled_from([0, 1, 1, 2, 2, 3, 3, 4])) for _ in range(rank)
        )
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
        with track_paths() as paths:
            gems_copy_(dst_view(dev_dst_base), src_view(src_base.to(DEVICE, copy=True)))
        numel = 1
        for n in shape:
            numel *= n
        assert paths.fallbacks == 0, layout
        assert len(paths.ranks) == (1 if numel else 0), layout
        ref = dst_base.clone()
        dst_view(ref).copy_(src_view(src_base))
        assert_bit_exact(dev_dst_base, ref, layout, src_dtype == dst_dtype)
