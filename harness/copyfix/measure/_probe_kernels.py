"""The kernel of :mod:`copyfix.measure.probe_conversions`, a module of its own: Triton
reads TRITON_INTERPRET when a kernel is decorated, so it is imported after the cpu
emulation is active."""

import triton
import triton.language as tl


@triton.jit
def _all(x, implicit_ptr, explicit_ptr, via_fp32_ptr, offs, mask):
    tl.store(implicit_ptr + offs, x, mask=mask)
    tl.store(explicit_ptr + offs, x.to(explicit_ptr.dtype.element_ty), mask=mask)
    tl.store(via_fp32_ptr + offs, x.to(tl.float32), mask=mask)


@triton.jit
def probe_kernel(
    src_ptr, i0, i1, i2, i3, i4, i5, i6, i7, i8,
    e0, e1, e2, e3, e4, e5, e6, e7, e8,
    f0, f1, f2, f3, f4, f5, f6, f7, f8, n, BLOCK: tl.constexpr,
):  # fmt: skip
    """x = src[:n]; i<k>[:] = x (the store converts); e<k>[:] = x.to(e<k>'s dtype);
    f<k>[:] = x.to(float32) (the store converts that: torch's two-step route)."""
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(src_ptr + offs, mask=mask)
    _all(x, i0, e0, f0, offs, mask)
    _all(x, i1, e1, f1, offs, mask)
    _all(x, i2, e2, f2, offs, mask)
    _all(x, i3, e3, f3, offs, mask)
    _all(x, i4, e4, f4, offs, mask)
    _all(x, i5, e5, f5, offs, mask)
    _all(x, i6, e6, f6, offs, mask)
    _all(x, i7, e7, f7, offs, mask)
    _all(x, i8, e8, f8, offs, mask)
