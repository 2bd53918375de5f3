"""Shims that let stock Triton accept the kunlunxin sources (cpu and cuda modes).

The kunlunxin backend imports ``triton.language.extra.xpu.libdevice``, calls
``triton.autotune(generate_configs=...)`` and passes XPU-only launch options; stock
Triton has none of these.  Each patch names the internal it replaces and the
version it was written for.
"""

from __future__ import annotations

import re
import sys
import types

# Launch options that only XPU Triton understands.  The kunlunxin wrappers pass them to
# every launch (flag_gems 5.0.2 _kunlunxin/utils/pointwise_dynamic.py and ops/*.py).
XPU_LAUNCH_OPTIONS = frozenset({"buffer_size_limit", "unroll_num"})
_XPU_LAUNCH_OPTION_RE = re.compile(r"^is(Close|Open)[A-Z]\w*$")

# Names the kunlunxin sources read from triton.language.extra.xpu.libdevice that CUDA
# libdevice lacks.  They become stubs that raise when called.
XPU_ONLY_LIBDEVICE = (
    "xpu_trunc_div",
    "fast_erf",
    "fast_gelu",
    "fast_sigmoid",
    "fast_tanh",
)


def _xpu_only_stub(name: str):
    def stub(*args, **kwargs):
        raise NotImplementedError(
            f"triton.language.extra.xpu.libdevice.{name} exists only in KunlunXIN's Triton; "
            "copyfix.emulation provides no emulation of it"
        )

    stub.__name__ = stub.__qualname__ = name
    stub.__module__ = "triton.language.extra.xpu.libdevice"
    # triton 3.6.0: runtime/jit.py DependenciesFinder (JITFunction.cache_key, computed by
    # flag_gems at import) rejects plain functions referenced by a kernel, and
    # compiler/code_generator.py only calls globals that are JIT functions or builtins.
    # Marked as a builtin, the stub is hashed like other builtins and called (and
    # raises) at compile time; the interpreter calls it directly (and it raises).
    stub.__triton_builtin__ = True
    return stub


def _is_xpu_launch_option(name: str) -> bool:
    return name in XPU_LAUNCH_OPTIONS or bool(_XPU_LAUNCH_OPTION_RE.match(name))


def strip_xpu_launch_options(jit_fn, kwargs: dict) -> dict:
    """Drop the XPU-only launch options the kernel does not declare as parameters."""
    declared = set(jit_fn.arg_names)
    return {
        k: v for k, v in kwargs.items() if k in declared or not _is_xpu_launch_option(k)
    }


def patch_triton_common() -> None:
    import triton
    import triton.language.extra as tl_extra
    import triton.runtime.autotuner as autotuner
    from triton.language.extra.cuda import libdevice as cuda_libdevice

    # --- triton 3.6.0: triton.language.extra.xpu does not exist in stock Triton.
    # flag_gems 5.0.2 imports triton.language.extra.<triton_extra_name>.libdevice
    # (runtime/backend/__init__.py set_tl_extra_backend_module; kunlunxin's
    # triton_extra_name is "xpu") and kunlunxin ops import it directly.  Provide it:
    # the CUDA libdevice functions (same objects, no copies) plus raising stubs for the
    # XPU-only names.
    if "triton.language.extra.xpu" not in sys.modules:
        xpu = types.ModuleType(
            "triton.language.extra.xpu",
            "copyfix emulation: stand-in for XPU Triton's extra.xpu",
        )
        xpu.__path__ = []
        libdevice = types.ModuleType(
            "triton.language.extra.xpu.libdevice",
            "copyfix emulation: CUDA libdevice functions plus raising stubs for XPU-only ones",
        )
        for name, value in vars(cuda_libdevice).items():
            if (
                getattr(value, "__module__", None) == cuda_libdevice.__name__
            ):  # its functions only
                setattr(libdevice, name, value)
        for name in XPU_ONLY_LIBDEVICE:
            if not hasattr(libdevice, name):
                setattr(libdevice, name, _xpu_only_stub(name))
        xpu.libdevice = libdevice
        sys.modules[xpu.__name__] = xpu
        sys.modules[libdevice.__name__] = libdevice
        tl_extra.xpu = xpu

    # --- triton 3.6.0 runtime/autotuner.py autotune(): XPU Triton accepts
    # generate_configs="mm" (kunlunxin ops/mm.py, addmm.py, bmm.py, index_add.py call it
    # at import).  Stock Triton has no such generator: drop the keyword.  With the
    # configs=[] those ops pass, stock Autotuner uses one empty Config, so launching such
    # a kernel fails (missing constexprs) instead of computing anything.
    if not getattr(autotuner.autotune, "_copyfix_patched", False):
        stock_autotune = autotuner.autotune

        def autotune(*args, generate_configs=None, **kwargs):
            return stock_autotune(*args, **kwargs)

        autotune._copyfix_patched = True
        autotune.__wrapped__ = stock_autotune
        autotuner.autotune = autotune
        triton.runtime.autotune = autotune
        triton.autotune = autotune


def patch_triton_jit_run() -> None:
    from triton.runtime.jit import JITFunction

    # --- triton 3.6.0 runtime/jit.py JITFunction.run(): its argument binder raises
    # KeyError on keyword arguments the kernel does not declare.  The kunlunxin launches
    # pass XPU-only options (buffer_size_limit=..., isCloseOffsetAnalysis=..., ...);
    # XPU Triton consumes them as compile options.  Drop those (and only those) here.
    if not getattr(JITFunction.run, "_copyfix_patched", False):
        stock_run = JITFunction.run

        def run(self, *args, grid, warmup, **kwargs):
            return stock_run(
                self,
                *args,
                grid=grid,
                warmup=warmup,
                **strip_xpu_launch_options(self, kwargs),
            )

        run._copyfix_patched = True
        run.__wrapped__ = stock_run
        JITFunction.run = run
