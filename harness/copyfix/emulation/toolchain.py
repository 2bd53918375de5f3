"""A fault model of the KunlunXIN Triton toolchain: conversions it cannot compile.

Upstream's KunlunXIN ``_to_copy`` (``_kunlunxin/ops/to.py``, sha256 ``cf99ee03…``,
FlagGems commit 3dc44c0d "fix some ops", 2026-08-11, on the ``fix_klx_op`` branch and
several PR refs; ``.upstream/later/kunlunxin_to_head.py`` here) works around three
conversions of the XPU toolchain, in its own words:

1. "Direct int32 -> fp16/bf16 casts can abort during XPU LLVM lowering" (and "Large int32
   -> fp16 tiles abort the current XPU LLVM lowering");
2. "fp16 -> bf16 is rejected by xpu3-elfconv";
3. "int16 -> bf16 turns almost every nonzero value into zero".

Its fix is two kernels through a wider intermediate tensor (int32 -> float32 -> fp16,
fp16 -> float32 -> bf16, int16 -> int32 -> bf16).  This model makes each of the three a
compile error of the kernel that contains it (the third one too: wrong values are harder
to see than an error, and harsher is the rule).  Like the device, it looks at what the
compiler would emit, not at the source: the interpreter's ``cast_impl``
(:mod:`copyfix.emulation.interpreter`) asks :func:`check` for every conversion,

* after the fold compiled Triton applies (``x.to(tl.float32)`` of an integer, truncated
  to a 16-bit float in the same kernel, is one direct conversion), and
* with a float16 value widened to float32 in the same kernel still counted as float16
  (Triton's own ``cast`` sends fp16 -> bf16 through float32: that is the case the
  toolchain rejects).

A conversion of a value loaded from memory (the second kernel of upstream's split) is
what it is.

Scope: kernels launched from KunlunXIN backend code (a frame of a ``_kunlunxin`` module
on the stack at launch: its ops and its ``pointwise_dynamic``).  Generic FlagGems kernels
in this repository's tests stand for other vendors (PR 2), whose toolchains compile these
conversions.  :func:`everywhere` turns the model on for every kernel (its own tests).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import Iterator

_WHY = (
    "[copyfix model of the KunlunXIN Triton toolchain, after upstream's "
    "_kunlunxin/ops/to.py cf99ee03]"
)

# (source, destination) -> what the toolchain does with the direct conversion
FAULTS = {
    ("int32", "fp16"): "int32 -> fp16 aborts the XPU LLVM lowering",
    ("int32", "bf16"): "int32 -> bf16 aborts the XPU LLVM lowering",
    ("fp16", "bf16"): "fp16 -> bf16 is rejected by xpu3-elfconv",
    ("int16", "bf16"): "int16 -> bf16 is miscompiled (nonzero values become 0)",
}


class ToolchainFault(RuntimeError):
    """What compiling a kernel with a conversion of :data:`FAULTS` raises here."""


class _State(threading.local):
    depth = 0  # launches in progress on this thread that the model covers


_state = _State()
_EVERYWHERE = [0]


def _name(dtype) -> str:
    """Triton's scalar type name (``fp16``, ``int32``, ...), the keys of FAULTS."""
    return getattr(dtype, "name", str(dtype))


def active() -> bool:
    return _state.depth > 0 or _EVERYWHERE[0] > 0


def check(src_dtype, dst_dtype) -> None:
    """Raise :class:`ToolchainFault` if the model covers this launch and the direct
    conversion ``src_dtype -> dst_dtype`` is one the toolchain cannot compile."""
    if not active():
        return
    why = FAULTS.get((_name(src_dtype), _name(dst_dtype)))
    if why is not None:
        raise ToolchainFault(f"{why}\n{_WHY}")


def _from_kunlunxin_code(depth_limit: int = 64) -> bool:
    frame = sys._getframe(1)
    for _ in range(depth_limit):
        if frame is None:
            return False
        name = frame.f_globals.get("__name__", "")
        if name.startswith("_kunlunxin.") or "._kunlunxin." in name:
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def launch() -> Iterator[None]:
    """Around one interpreted launch: the model covers it if KunlunXIN code launched it."""
    covered = _from_kunlunxin_code()
    if covered:
        _state.depth += 1
    try:
        yield
    finally:
        if covered:
            _state.depth -= 1


@contextlib.contextmanager
def everywhere() -> Iterator[None]:
    """The model on for every kernel, whoever launches it."""
    _EVERYWHERE[0] += 1
    try:
        yield
    finally:
        _EVERYWHERE[0] -= 1
