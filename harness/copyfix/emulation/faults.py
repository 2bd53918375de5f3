"""XPU fault injection: make aten's strided copy fallback fail as on KunlunXIN.

On KunlunXIN (torch_xmlir) torch's native non-contiguous elementwise copy kernel is
missing; the kunlunxin ``copy_`` redispatches to it for whatever its Triton kernel does
not take, and the launch dies with ``torch.AcceleratorError: CUDA error: invalid
device function``.  :func:`xpu_fallback_failure` reproduces exactly that anywhere.
"""

from __future__ import annotations

import contextlib
from typing import Iterator


class _FailingNonContiguousHandle:
    """Operator handle whose redispatch fails for non-contiguous operands like XPU's."""

    def __init__(self, handle):
        self._stock = handle

    def redispatch_boxed(self, keyset, *args, **kwargs):
        import torch

        tensors = [
            a
            for a in list(args[:2]) + [kwargs.get("self"), kwargs.get("src")]
            if isinstance(a, torch.Tensor)
        ]
        if any(not t.is_contiguous() for t in tensors):
            raise _invalid_device_function()
        return self._stock.redispatch_boxed(keyset, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._stock, name)


def _invalid_device_function():
    import torch

    # What torch raises for cudaErrorInvalidDeviceFunction (98): an AcceleratorError
    # whose error_code attribute carries the runtime error code.
    error = torch.AcceleratorError(
        "CUDA error: invalid device function\n"
        "[copyfix emulation of KunlunXIN: torch's native non-contiguous (strided) copy kernel "
        "is missing on XPU]"
    )
    error.error_code = 98
    return error


@contextlib.contextmanager
def xpu_fallback_failure() -> Iterator[None]:
    """Make torch's native strided copy fallback fail as on KunlunXIN.

    While open, ``torch.ops.aten.copy_.default.redispatch(keyset, dst, src, ...)`` (the
    fallback the kunlunxin ``copy_`` takes for what its Triton kernel does not handle)
    raises ``torch.AcceleratorError("CUDA error: invalid device function")`` when ``dst``
    or ``src`` is not contiguous, which is when torch would launch its non-contiguous
    elementwise copy kernel that XPU lacks.  Contiguous fallback copies still run.

    Composes with ``unittest.mock.patch.object(torch.ops.aten.copy_.default,
    "redispatch", wraps=...)`` in either nesting order: the failure is injected one level
    below ``redispatch``, so a mock counts the failing calls too.
    """
    import torch

    op = torch.ops.aten.copy_.default
    # torch 2.13.0 (2.11.x) torch/_ops.py: OpOverload.redispatch(keyset, *args) is
    # `self._handle.redispatch_boxed(keyset, *args)`, where _handle is a
    # functools.cached_property stored in the instance __dict__ (OpOverload declares
    # __slots__ = () but its bases give instances a __dict__).  Shadow it with a proxy
    # for the duration; deleting the shadow lets the cached property recompute it.
    previous = op.__dict__.get("_handle", None)
    stock = op._handle
    op.__dict__["_handle"] = _FailingNonContiguousHandle(stock)
    try:
        yield
    finally:
        if previous is None:
            op.__dict__.pop("_handle", None)
        else:
            op.__dict__["_handle"] = previous
