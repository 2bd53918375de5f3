"""A fault model of the KunlunXIN Triton toolchain: conversions it cannot compile.

Upstream's KunlunXIN ``_to_copy`` (``_kunlunxin/ops/to.py`` sha256 ``cf99ee03…``, FlagGems
3dc44c0d "fix some ops"; ``.upstream/later/kunlunxin_to_head.py`` here) splits the
:data:`FAULTS` conversions through a wider type.  Each is a compile error here (the
miscompile too: harsher is the rule), checked by the interpreter's ``cast_impl`` on what
the compiler would emit.  Scope: kernels launched from ``_kunlunxin`` code (generic
kernels stand for other vendors' toolchains); :func:`everywhere` covers every kernel.
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


_state = threading.local()  # .depth: covered launches in progress on this thread
_EVERYWHERE = [0]


def active() -> bool:
    return getattr(_state, "depth", 0) > 0 or _EVERYWHERE[0] > 0


def check(src_dtype, dst_dtype) -> None:
    """Raise :class:`ToolchainFault` if the model covers this launch and the direct
    conversion ``src_dtype -> dst_dtype`` is one the toolchain cannot compile."""
    if not active():
        return
    names = tuple(getattr(t, "name", str(t)) for t in (src_dtype, dst_dtype))
    why = FAULTS.get(names)
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
    _state.depth = getattr(_state, "depth", 0) + covered
    try:
        yield
    finally:
        _state.depth -= covered


@contextlib.contextmanager
def everywhere() -> Iterator[None]:
    """The model on for every kernel, whoever launches it."""
    _EVERYWHERE[0] += 1
    try:
        yield
    finally:
        _EVERYWHERE[0] -= 1
