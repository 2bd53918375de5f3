"""What the copy_ guard tests share: dtypes, layouts, host values, torch's result on
the host, and the count of Triton launches and aten fallbacks of each copy.

Every reference is computed by torch on the CPU from the same values, and tensors
reach the device only as contiguous buffers: on KunlunXIN torch's own strided copy is
the kernel that fails, so it cannot serve as the reference there.
"""

import sys

import pytest
import torch

import flag_gems
from copyfix import tracking
from tests.test_copy_ops import BITS, _same
from tests.test_copy_ops import LAYOUTS as PR_LAYOUTS
from tests.test_copy_ops import SHORT as PR_SHORT

DEVICE = flag_gems.device
COPY_MODULE = "_kunlunxin.ops.copy"

FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32]
INT_DTYPES = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]
TRITON_DTYPES = FLOAT_DTYPES + INT_DTYPES + [torch.bool]
SHORT = {**PR_SHORT, torch.float64: "fp64"}
BY_SHORT = {name: dtype for dtype, name in SHORT.items()}


def pairs(spec):
    """Dtype pairs from "fp32->bf16 i32->bool ..." (SHORT's names)."""
    return [tuple(BY_SHORT[n] for n in p.split("->")) for p in spec.split()]


def cases(spec):
    """(layout, src dtype, dst dtype) from "transpose:fp32->bf16 ..."."""
    return [(c.split(":")[0], *pairs(c.split(":")[1])[0]) for c in spec.split()]


DTYPE_PAIRS = [(d, d) for d in TRITON_DTYPES] + pairs(
    "fp32->bf16 fp32->fp16 bf16->fp32 fp16->fp32 bf16->fp16 fp32->i32 fp16->i8"
    " bf16->u8 i32->fp32 i64->bf16 u8->fp16 i64->i8 i8->i64 bool->fp32 fp32->bool"
    " i32->bool"
)

# name: (src base shape, src view, dst base shape, dst view): the PR tests' layouts
# (their strided_dst named dst_transposed here) and three more
LAYOUTS = {name: layout for name, layout in PR_LAYOUTS.items() if name != "strided_dst"}
LAYOUTS["dst_transposed"] = PR_LAYOUTS["strided_dst"]
LAYOUTS.update(
    transpose4d_inner=((2, 3, 4, 5), lambda s: s.transpose(2, 3), (2, 3, 5, 4), _same),
    size1_dims=((7, 9), lambda s: s.t().unsqueeze(0).unsqueeze(2), (1, 9, 1, 7), _same),
    rank8=((2, 3) * 4, lambda s: s.permute(*range(7, -1, -1)), (3, 2) * 4, _same),
)


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
    """The kernel copy_ must launch for dst <- src (src broadcast to dst's shape): a
    conversion where Triton's store differs from torch has its own kernel."""
    s, d = src.dtype, dst.dtype
    if d is torch.bool and s is not torch.bool:
        return "_to_bool_kernel"
    if d is torch.bfloat16 and (
        s is torch.float16 or not (s.is_floating_point or s is torch.bool)
    ):
        return "_to_bf16_kernel"
    if d is torch.uint8 and s.is_floating_point:
        return "_float_to_uint8_kernel"
    dense = snapshot or src.expand(dst.shape).is_contiguous()  # (a snapshot is)
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
    """One copy: CPU originals for the reference, device buffers for flag_gems.

    `layout`: a name of LAYOUTS, or (src base shape, src view, dst base shape,
    dst view) with `name` to report it by; a base given as a (CPU) tensor instead of
    a shape is used as it is."""

    def __init__(self, layout, src_dtype, dst_dtype, seed=0, neg="", name=None):
        if isinstance(layout, str):
            name, layout = layout, LAYOUTS[layout]
        src_shape, self.src_view, dst_shape, self.dst_view = layout
        if neg in ("src", "both"):
            self.src_view = _negated(self.src_view)
        if neg in ("dst", "both"):
            self.dst_view = _negated(self.dst_view)
        gen = torch.Generator().manual_seed(seed)
        self.name = f"{name}-{SHORT[src_dtype]}->{SHORT[dst_dtype]}"
        self.src_base, self.dst_base = (
            shape
            if torch.is_tensor(shape)
            else make_values(shape, dtype, dst_dtype, gen)
            for shape, dtype in ((src_shape, src_dtype), (dst_shape, dst_dtype))
        )
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

    def copy_and_check(self, copy_=None):
        """`copy_` (Tensor.copy_ under use_gems by default): no aten fallback,
        exactly the expected launches (none for an empty dst), torch's result."""
        with track_paths() as paths:
            out = (copy_ or gems_copy_)(self.dst, self.src)
        assert out is self.dst
        assert paths.fallbacks == 0, f"{self.name} fell back to aten"
        expected = expected_launches(self.dst, self.src) if self.dst.numel() else []
        assert paths.launches == expected, f"{self.name}: {paths.launches}"
        self.check()


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


def track_paths():
    """Count copy_'s Triton launches (``paths.launches``: one (kernel name, rank) each,
    every one of the op's kernels spied on) and aten fallbacks (``paths.fallbacks``)."""
    return tracking.track(copy_module(), kernels=tracking.OP_KERNELS)


def gems_copy_(dst, src):
    with flag_gems.use_gems(include=["copy_"]):
        return dst.copy_(src)


def assert_torch_error(make, fallbacks=0, ref_device="cpu", untouched=True):
    """make(device) -> (dst, src, buffer): Tensor.copy_ under use_gems raises torch's
    exact error (torch run on `ref_device`), with `fallbacks` aten fallbacks and no
    launch; `buffer` is left untouched (else: as torch leaves it, having written)."""
    ref_dst, ref_src, ref_buf = make(ref_device)
    expected = torch_error(lambda: ref_dst.copy_(ref_src))
    dst, src, buf = make(DEVICE)
    before = host_view(buf).clone() if untouched else ref_buf.cpu()
    with track_paths() as paths, pytest.raises(expected[0]) as err:
        gems_copy_(dst, src)
    assert str(err.value) == expected[1]
    assert paths.launches == [] and paths.fallbacks == fallbacks
    assert_bit_exact(buf, before, f"{expected[1]!r}: destination untouched")


def torch_error(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - we compare whatever torch raises
        return type(exc), str(exc)
    raise AssertionError("torch accepted this copy")
