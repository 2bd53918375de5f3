"""cpu mode: interpreter stand-ins for KunlunXIN libdevice functions.

Stands for ``triton.language.extra.xpu.libdevice``, the math library of KunlunXIN's
Triton (FlagTree's XPU backend, its ``language/extra/xpu/libdevice.py``: extern
functions lowered to the XPU's device library).  flag_gems' kunlunxin ops call it
directly (5.0.2 and main 2026-08-21 ``_kunlunxin/ops/rsqrt.py``: ``xpu.rsqrt``) or
through ``flag_gems.utils.tl_extra_shim`` (``ops/pow.py``: ``tl_extra_shim.pow``, bound
at import).  In cuda mode :mod:`.shims` gives them CUDA libdevice's extern functions,
which compiled Triton lowers; Triton's interpreter runs no extern function
(3.6 ``InterpreterBuilder.create_extern_elementwise`` raises, and the call fails
before that for want of ``_semantic``).  Here each name the kunlunxin ops reach gets the
same math from what the interpreter does run: ``triton.language`` (``tl.math``) where
it has the function, else the interpreter's own numpy arithmetic (the way its
``create_*`` builders compute ``tl.math``), with the signatures of the libdevice
function (fp32 and fp64 only, as its table; any other dtype raises, as an extern call
with no matching signature does on the device).

How the emulation could hide a device failure: the XPU library's results may differ in
the last bits (an approximate ``rsqrt``, a ``pow`` through exp2/log2) where numpy's are
correctly rounded or nearly so; a decode whose tokens hang on such bits could pass here
and differ on the device.  Nothing here is more lenient about *which* calls are allowed:
a name without a stand-in keeps CUDA libdevice's extern function, which the
interpreter rejects, and the XPU-only names (:data:`.shims.XPU_ONLY_LIBDEVICE`) stay
stubs that raise.
"""

from __future__ import annotations

import triton
import triton.language as tl

# Names given an interpreter stand-in (install() replaces exactly these).
STAND_INS = ("rsqrt", "pow", "sqrt", "exp", "exp2", "log", "log2", "erf")


@triton.jit
def rsqrt(x):
    return tl.math.rsqrt(x)


@triton.jit
def sqrt(x):
    return tl.math.sqrt(x)


@triton.jit
def exp(x):
    return tl.math.exp(x)


@triton.jit
def exp2(x):
    return tl.math.exp2(x)


@triton.jit
def log(x):
    return tl.math.log(x)


@triton.jit
def log2(x):
    return tl.math.log2(x)


@triton.jit
def erf(x):
    return tl.math.erf(x)


def _numpy_pow(base, exponent):
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


def pow(x, y):  # noqa: A001  (libdevice's name)
    return _numpy_pow(x, y)


# triton 3.6.0 runtime/jit.py DependenciesFinder (the cache_key flag_gems reads at
# import) accepts only JIT functions and builtins among a kernel's globals: pow is
# marked as a builtin (as the XPU-only stubs of .shims are); the interpreter calls it
# directly, with the interpreter's tensors.
pow.__triton_builtin__ = True
pow.__module__ = "triton.language.extra.xpu.libdevice"


def install(libdevice) -> None:
    """Put the stand-ins into the ``triton.language.extra.xpu.libdevice`` stand-in
    module (cpu mode, before ``import flag_gems`` binds them)."""
    for name in STAND_INS:
        setattr(libdevice, name, globals()[name])
