"""A fault model of the KunlunXIN device: aten's strided copy kernel is missing.

On KunlunXIN (torch_xmlir) aten's elementwise copy exists only as a flat loop.  Any
``aten::copy_`` between two tensors on the device that TensorIterator cannot run as one
contiguous loop needs the strided (non-contiguous) kernel, and its launch dies with
``torch.AcceleratorError: CUDA error: invalid device function`` (cudaErrorInvalidDeviceFunction,
98).  It dies for whoever calls it: FlagGems' own fallback, a benchmark's aten baseline,
``clone``/``contiguous``/``to`` of a strided tensor, a reference computed on the device.

The rules this model keeps (each has a test in tests/tooling/test_device_model.py):

1. **Flat loop.**  A same-device copy runs when ``dst`` and ``src`` have the same shape and
   either both are contiguous, or both are non-overlapping and dense with equal strides
   (TensorIterator coalesces such a pair into one contiguous loop, dtype conversion and
   negation included).  Anything else (a broadcast source, a transpose, a slice, a
   permute, a strided destination) faults.
2. **aten's own errors and early returns come first.**  The fault is raised only where
   aten would reach its kernel: not for zero tensors, meta tensors, ``x.copy_(x)``, empty
   copies, non-strided layouts, quantized tensors, nor where TensorIterator raises its own
   error (internal overlap of ``dst``, partial overlap, shapes that do not broadcast).
3. **Cross-device copies are not faulted here.**  aten runs a host<->device copy as a
   memcpy of contiguous buffers and stages anything else through ``.contiguous()`` /
   ``dst.copy_(staging)`` on the device, which are device copies dispatched again: those
   inner copies meet rule 1.  So ``strided.cpu()`` faults on the device side, as on the XPU,
   and ``contiguous.cpu()`` runs.  (In the cpu emulation there is no second device: see below.)
4. **FlagGems takes the copy when it is registered.**  The model is a kernel for
   ``aten::copy_`` on the device's dispatch key.  ``flag_gems.use_gems()``/``enable()``
   register FlagGems' ``copy_`` on the same key later, and the dispatcher uses the most
   recent registration, so FlagGems' ``copy_`` runs while it is registered and the model
   is back when it is removed (a test pins this).  FlagGems' own fallback reaches aten by
   ``redispatch`` with the CompositeExplicitAutograd keyset, below the device key; the model
   intercepts that call too (``_FaultyHandle``), with the same rules.

**Recording instead of raising.**  Given a list (``record=``), :func:`xpu_device_model` and
:func:`xpu_fallback_failure` append one entry per copy the model would fault (which way
it reached aten, both layouts, the FlagGems op and the caller's line that led there:
:func:`fault_entry`) and let aten run it, so a whole run lists every such copy instead
of stopping at the first.

The cpu emulation keeps a narrower fault (:func:`xpu_fallback_failure`): there the emulated device
and the host that holds the references are the same CPU, so faulting every CPU copy
would break the references and torch itself.  Only FlagGems' fallback (the redispatch)
is faulted there.  :func:`xpu_device_model` with ``device_type="cpu"`` installs the whole
model on the CPU key for a scope, which the model's own tests use.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Iterator

from . import state

_WHY = (
    "[copyfix model of KunlunXIN: aten's strided (non-contiguous) copy kernel is missing "
    "on the XPU]"
)


def invalid_device_function():
    """What torch raises for cudaErrorInvalidDeviceFunction (98)."""
    import torch

    error = torch.AcceleratorError(f"CUDA error: invalid device function\n{_WHY}")
    error.error_code = 98
    return error


def is_flat_loop(dst, src) -> bool:
    """Rule 1: whether TensorIterator runs this same-device copy as one contiguous loop."""
    import torch

    if dst.shape != src.shape:
        return False
    if dst.is_contiguous() and src.is_contiguous():
        return True
    dense = torch.ops.aten.is_non_overlapping_and_dense
    return bool(dense(dst) and dense(src) and dst.stride() == src.stride())


def _overlaps_partially(dst, src) -> bool:
    """at::get_overlap_status(dst, src) == PARTIAL (what assert_no_partial_overlap raises on)."""
    import torch

    if dst.numel() == 0 or src.numel() == 0:
        return False
    dense = torch.ops.aten.is_non_overlapping_and_dense
    if not (dense(dst) and dense(src)) or not torch._C._is_alias_of(dst, src):
        return False  # TOO_HARD or NO: aten does not raise
    d0, s0 = dst.data_ptr(), src.data_ptr()
    d1, s1 = (
        d0 + dst.numel() * dst.element_size(),
        s0 + src.numel() * src.element_size(),
    )
    if (d0, d1) == (s0, s1):
        return dst.stride() != src.stride()
    return d0 < s1 and s0 < d1


def aten_reaches_kernel(dst, src) -> bool:
    """Rule 2: aten::copy_ would launch its elementwise kernel for this pair."""
    import torch

    if not (isinstance(dst, torch.Tensor) and isinstance(src, torch.Tensor)):
        return False
    if dst is src or dst.is_meta or src.is_meta:
        return False
    if dst.layout != torch.strided or src.layout != torch.strided:
        return False
    if dst.is_quantized or src.is_quantized:
        return False
    if dst._is_zerotensor() or src._is_zerotensor():
        return False
    # at::has_internal_overlap is Yes only for a broadcast dim of a non-dense tensor
    if dst.numel() and any(s == 0 and n > 1 for n, s in zip(dst.shape, dst.stride())):
        return False
    if _overlaps_partially(dst, src):
        return False
    try:
        if torch.broadcast_shapes(dst.shape, src.shape) != dst.shape:
            return False
    except RuntimeError:
        return False
    return dst.numel() > 0


def fault_applies(dst, src, device_type: str) -> bool:
    """Whether aten::copy_(dst, src) needs the kernel the device lacks."""
    return (
        aten_reaches_kernel(dst, src)
        and dst.device.type == device_type
        and src.device.type == device_type
        and not is_flat_loop(dst, src)
    )


# frames of these packages are the machinery between a caller and aten, not a call site
_MACHINERY = ("/torch/", "/copyfix/emulation/", "/contextlib.py", "/flag_gems/")


def _frame_label(frame) -> str:
    code = frame.f_code
    path = code.co_filename
    short = path.split("/site-packages/")[-1].split("/flag_gems/")[-1]
    return f"{short}:{frame.f_lineno} {code.co_name}"


def fault_entry(dst, src, via: str) -> dict:
    """What a recording model lists for one faulting copy: ``via`` ("dispatch": a
    copy_ dispatched to the device key, e.g. torch's clone/contiguous; "redispatch":
    FlagGems' own fallback) and :func:`call_entry`."""
    return {"via": via, **call_entry(dst, src, sys._getframe(1))}


def call_entry(dst, src, frame) -> dict:
    """One copy seen from ``frame`` (its caller's): ``op``, the outermost FlagGems
    frame (the op torch dispatched to, None if FlagGems is not on the stack),
    ``call_site``, the innermost frame outside torch, FlagGems and the emulation, and
    both layouts."""
    op = call_site = None
    while frame is not None:
        path = frame.f_code.co_filename
        if "/flag_gems/" in path:
            op = _frame_label(frame)
        elif call_site is None and not any(m in path for m in _MACHINERY):
            call_site = _frame_label(frame)
        frame = frame.f_back
    return {"op": op, "call_site": call_site, "dst": _layout(dst), "src": _layout(src)}


def _layout(t) -> dict:
    if not hasattr(t, "stride"):  # (a Python number given to copy_)
        return {"scalar": type(t).__name__}
    return {
        "shape": list(t.shape),
        "stride": list(t.stride()),
        "dtype": str(t.dtype).replace("torch.", ""),
    }


def _fault(dst, src, via: str, record: list | None) -> None:
    """Raise the device's error, or (``record`` given) append :func:`fault_entry`."""
    if record is None:
        raise invalid_device_function()
    record.append(fault_entry(dst, src, via))


def _device_type() -> str:
    return "cpu" if state.require() == "cpu" else "cuda"


class _FaultyHandle:
    """aten::copy_'s operator handle, with the model applied to ``redispatch``."""

    def __init__(self, handle, device_type, record=None):
        self._stock = handle
        self._device_type = device_type
        self._record = record

    def redispatch_boxed(self, keyset, *args, **kwargs):
        dst = args[0] if args else kwargs.get("self")
        src = args[1] if len(args) > 1 else kwargs.get("src")
        if fault_applies(dst, src, self._device_type):
            _fault(dst, src, "redispatch", self._record)
        return self._stock.redispatch_boxed(keyset, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._stock, name)


@contextlib.contextmanager
def _faulty_redispatch(device_type: str, record: list | None = None) -> Iterator[None]:
    import torch

    op = torch.ops.aten.copy_.default
    # torch 2.13.0 / 2.11.x torch/_ops.py: OpOverload.redispatch(keyset, *args) is
    # `self._handle.redispatch_boxed(keyset, *args)`, with _handle a
    # functools.cached_property kept in the instance __dict__.  Shadow it for the
    # duration; dropping the shadow lets the cached property come back.
    previous = op.__dict__.get("_handle", None)
    stock = op._handle
    op.__dict__["_handle"] = _FaultyHandle(stock, device_type, record)
    try:
        yield
    finally:
        if previous is None:
            op.__dict__.pop("_handle", None)
        else:
            op.__dict__["_handle"] = previous


@contextlib.contextmanager
def xpu_fallback_failure(
    device_type: str | None = None, record: list | None = None
) -> Iterator[None]:
    """The narrow fault: only ``aten::copy_`` reached by ``redispatch`` (FlagGems'
    fallback) follows the model's rules.  What the cpu emulation runs its suites with.
    ``record``: list the faulting copies there and run them (see the module text)."""
    with _faulty_redispatch(device_type or _device_type(), record):
        yield


@contextlib.contextmanager
def xpu_device_model(
    device_type: str | None = None, record: list | None = None
) -> Iterator[None]:
    """The whole model (rules 1-4) for every caller, while open.

    ``device_type`` defaults to the emulated device: "cuda" in the cuda emulation.  In the cpu emulation the
    default is the narrow fault (see the module text); pass "cpu" to install the whole
    model on the CPU key for a scope that computes no reference inside it.
    ``record``: a list that receives one :func:`fault_entry` per copy the model would
    fault, which then runs as aten runs it (nothing is raised).
    """
    import torch

    if device_type is None:
        if _device_type() == "cpu":
            with xpu_fallback_failure("cpu", record):
                yield
            return
        device_type = "cuda"
    op = torch.ops.aten.copy_.default
    stock = op._handle
    composite = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)

    def copy_(dst, src, non_blocking=False):
        if fault_applies(dst, src, device_type):
            _fault(dst, src, "dispatch", record)
        # aten's own copy_ (its CompositeExplicitAutograd kernel): what the device key
        # runs when nothing is registered there
        return stock.redispatch_boxed(composite, dst, src, non_blocking)

    lib = torch.library.Library("aten", "IMPL")
    try:
        _register_below_later_ones(torch, lib, "copy_", copy_, device_type.upper())
        with _faulty_redispatch(device_type, record):
            yield
    finally:
        lib._destroy()


def _register_below_later_ones(torch, lib, op, fn, key):
    """Register fn for aten::op on key so that a later registration still takes over.

    The dispatcher keeps every registration of one operator and key, uses the latest and
    restores the previous one when the latest is removed: rule 4 rests on that.  But
    torch 2.11's torch/library.py Library.impl refuses a second *Python* kernel for one
    operator and key (it keeps them in the module-level set ``_impls``; torch 2.13's
    ``allow_override`` defaults to allowing it), and FlagGems' registrar logs that refusal
    and goes on without its kernel.  So the model's entry is kept out of ``_impls``:
    FlagGems' later ``use_gems()`` registers over it, as it would on the device, and a
    registration already there does not refuse the model.
    """
    impls = torch.library._impls
    name = f"aten/{op}/{key}"
    held = name in impls  # (FlagGems registered first: its entry stays)
    impls.discard(name)
    try:
        lib.impl(op, fn, key)
    finally:
        if not held:
            impls.discard(name)
        lib._op_impls.discard(name)  # (so that destroying ours leaves theirs alone)
