"""cpu mode: interpreter stand-ins for KunlunXIN libdevice functions.

Stand for ``triton.language.extra.xpu.libdevice`` (FlagTree's XPU device library), which
the kunlunxin ops call (``xpu.rsqrt``, ``tl_extra_shim.pow``); the interpreter runs no
extern function, so each name gets the same math from ``tl.math`` or numpy, with
libdevice's signatures (fp32/fp64 only; other dtypes raise).  Results may differ from
the XPU's in the last bits; a name without a stand-in keeps the CUDA extern (which the
interpreter rejects), and the XPU-only names stay stubs that raise.
"""

from __future__ import annotations

import triton.language as tl

from .shims import libdevice_builtin

# Names given an interpreter stand-in (install() replaces exactly these).
STAND_INS = ("rsqrt", "pow", "sqrt", "exp", "exp2", "log", "log2", "erf")


def _from_tl_math(name: str):
    """libdevice's one-argument ``name`` as ``tl.math.<name>``, looked up at the call:
    inside a kernel, where the interpreter has put its own ``tl.math`` in place."""
    return libdevice_builtin(lambda x: getattr(tl.math, name)(x), name)


rsqrt, sqrt, exp, exp2, log, log2, erf = map(
    _from_tl_math, ("rsqrt", "sqrt", "exp", "exp2", "log", "log2", "erf")
)


def pow(base, exponent):  # noqa: A001  (libdevice's name)
    """``pow`` as libdevice's table has it ((fp32, fp32) -> fp32, (fp64, fp64) ->
    fp64; an int32 exponent as powi), on the interpreter's numpy data."""
    import numpy as np
    from triton.runtime import interpreter

    def as_tensor(value, like):
        if isinstance(value, tl.tensor):
            return value
        if isinstance(value, tl.constexpr):
            value = value.value
        dtype = like.dtype.scalar
        data = np.array(value, dtype=interpreter._get_np_dtype(dtype))
        return tl.tensor(interpreter.TensorHandle(data, dtype), dtype)

    if not isinstance(base, tl.tensor):
        base = as_tensor(base, exponent)
    exponent = as_tensor(exponent, base)
    kind = base.dtype.scalar
    if kind not in (tl.float32, tl.float64) or exponent.dtype.scalar not in (
        kind,
        tl.int32,
    ):
        raise ValueError(
            f"libdevice pow has no signature ({base.dtype.scalar}, {exponent.dtype.scalar}) "
            "(fp32/fp64 with the same type or an int32 exponent)"
        )
    np_dtype = interpreter._get_np_dtype(kind)
    a = np.asarray(base.handle.data, dtype=np_dtype)
    b = np.asarray(exponent.handle.data)
    with np.errstate(all="ignore"):
        data = np.power(a, b.astype(np_dtype)).astype(np_dtype)
    # (the interpreter holds a scalar as a one-element array of a non-block type)
    blocks = [
        tuple(int(d) for d in t.shape) for t in (base, exponent) if t.type.is_block()
    ]
    ty = tl.block_type(kind, list(np.broadcast_shapes(*blocks))) if blocks else kind
    return tl.tensor(interpreter.TensorHandle(data, kind), ty)


pow = libdevice_builtin(pow, "pow")  # noqa: A001


def install(libdevice) -> None:
    """Put the stand-ins into the ``triton.language.extra.xpu.libdevice`` stand-in
    module (cpu mode, before ``import flag_gems`` binds them)."""
    for name in STAND_INS:
        setattr(libdevice, name, globals()[name])
