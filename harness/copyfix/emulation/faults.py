"""A fault model of the KunlunXIN device: aten's strided copy kernel is missing.

On the XPU (torch_xmlir) aten's elementwise copy exists only as a flat loop; any
same-device ``aten::copy_`` TensorIterator cannot run as one contiguous loop dies with
``CUDA error: invalid device function`` (98), whoever calls it.  The rules (one test
each in tests/tooling/test_device_model.py):

1. A copy runs when ``dst`` and ``src`` have one shape and are both contiguous, or both
   non-overlapping and dense with equal strides; anything else faults.
2. aten's own errors and early returns come first (meta, self, empty, non-strided,
   quantized, zero tensors, internal or partial overlap, shapes that do not broadcast).
3. Cross-device copies are not faulted here: aten stages them through device copies,
   which meet rule 1.
4. ``flag_gems.use_gems()`` registers over the model on the device key and takes the
   copy while registered; FlagGems' fallback (``redispatch``) meets the model too.

Given ``record=``, the copies that would fault are listed (:func:`call_entry`) and
run.  In the cpu emulation the host holding the references is the emulated device, so
the default there is the narrow fault, :func:`xpu_fallback_failure` (the redispatch
only); ``xpu_device_model("cpu")`` installs the whole model for a scope.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Iterator
from unittest import mock

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
    d1 = d0 + dst.numel() * dst.element_size()
    s1 = s0 + src.numel() * src.element_size()
    if (d0, d1) == (s0, s1):
        return dst.stride() != src.stride()
    return d0 < s1 and s0 < d1


def aten_reaches_kernel(dst, src) -> bool:
    """Rule 2: aten::copy_ would launch its elementwise kernel for this pair."""
    import torch

    pair = (dst, src)
    if not all(isinstance(t, torch.Tensor) for t in pair) or dst is src:
        return False
    if any(t.is_meta or t.layout != torch.strided for t in pair):
        return False
    if any(t.is_quantized or t._is_zerotensor() for t in pair):
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
        and dst.device.type == src.device.type == device_type
        and not is_flat_loop(dst, src)
    )


# frames of these packages are the machinery between a caller and aten, not a call site
_MACHINERY = ("/torch/", "/copyfix/emulation/", "/contextlib.py", "/flag_gems/")


def _frame_label(frame) -> str:
    code = frame.f_code
    path = code.co_filename
    short = path.split("/site-packages/")[-1].split("/flag_gems/")[-1]
    return f"{short}:{frame.f_lineno} {code.co_name}"


def call_entry(dst, src, frame) -> dict:
    """One copy seen from ``frame``: ``op`` (the outermost FlagGems frame, or None),
    ``call_site`` (the innermost frame outside torch, FlagGems and the emulation) and
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
    """Raise the device's error, or list the copy in ``record`` (``via``: "dispatch"
    to the device key, or FlagGems' "redispatch")."""
    if record is None:
        raise invalid_device_function()
    record.append({"via": via, **call_entry(dst, src, sys._getframe(0))})


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
def xpu_fallback_failure(
    device_type: str | None = None, record: list | None = None
) -> Iterator[None]:
    """The narrow fault: only ``aten::copy_`` reached by ``redispatch`` (FlagGems'
    fallback) meets the model (the cpu emulation's suites)."""
    import torch

    op = torch.ops.aten.copy_.default
    # torch 2.13 / 2.11 OpOverload.redispatch calls `self._handle.redispatch_boxed`,
    # _handle a cached_property in the instance __dict__: shadowed for the scope
    handle = _FaultyHandle(op._handle, device_type or _device_type(), record)
    with mock.patch.dict(op.__dict__, {"_handle": handle}):
        yield


@contextlib.contextmanager
def xpu_device_model(
    device_type: str | None = None, record: list | None = None
) -> Iterator[None]:
    """The whole model (rules 1-4) for every caller, while open; ``device_type``
    defaults to "cuda" (the cpu emulation: the narrow fault; "cpu" for the whole)."""
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
        # aten's own copy_: what the device key runs with nothing registered there
        return stock.redispatch_boxed(composite, dst, src, non_blocking)

    lib = torch.library.Library("aten", "IMPL")
    try:  # (rule 4: a later registration still takes over)
        state.register_kernel(lib, "copy_", copy_, device_type.upper())
        with xpu_fallback_failure(device_type, record):
            yield
    finally:
        lib._destroy()
