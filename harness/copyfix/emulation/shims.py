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
# Stand for XPU Triton's compile options (FlagTree's XPU backend reads them at launch:
# buffer sizes, unrolling, the cluster layout, the SDNN unit, mask-to-zero loads and the
# switches of its TTXPU passes).  Stock Triton has none of them; dropping them compiles
# the kernel without the XPU pass they tune or switch off.  How that could hide a
# device failure: a kernel that fails on the XPU only with one of these passes on
# (or off) runs here; the emulation checks results, not XPU code generation.  Only
# options the kernel does not declare are dropped, by name (never any unknown keyword).
# (is_use_mask_zero: kunlunxin softmax/sort/cummax/cummin/nllloss/nonzero;
# isCLOSE_TTXPU_O_ATOMIC_SIM: vdot, whose capitalised CLOSE the pattern below does not
# match; groups_per_cluster and is_sdnn: flag_gems main 2026-08-21's kunlunxin ops.)
XPU_LAUNCH_OPTIONS = frozenset(
    {
        "buffer_size_limit",
        "unroll_num",
        "is_use_mask_zero",
        "isCLOSE_TTXPU_O_ATOMIC_SIM",
        "groups_per_cluster",
        "is_sdnn",
    }
)
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
    # generate_configs="mm" (kunlunxin ops/mm.py, addmm.py, bmm.py call it at import,
    # with configs=[]).  It stands for FlagTree's XPU autotuner (FlagTree's xpu backend,
    # its triton.runtime.autotuner: per-shape configs generated at launch from the
    # key arguments M, N, K).  Stock Triton has no such generator: with configs=[] it
    # would use one empty Config, and the kernel's heuristics fail on the missing tile
    # keys (KeyError: 'BLOCK_K').  The stand-in (GeneratedConfigsAutotuner) gives
    # each launch ONE config computed from its shape (generated_config): the config
    # keys each op's kernel reads, power-of-two tiles that fit an NVIDIA GPU's shared
    # memory in cuda mode.  How it could hide a device failure: the XPU's generator
    # picks other tiles (and benchmarks several), so a failure specific to one of its
    # tiles (a tile too large for the XPU's local memory, a boundary bug at its tile
    # size) does not show here.  To stay at least as harsh at the boundaries, a
    # dimension that is not a power of two gets a tile that does not divide it (the
    # kernels' masked paths run), and the smallest tile is 16 (what tl.dot accepts).
    if not getattr(autotuner.autotune, "_copyfix_patched", False):
        stock_autotune = autotuner.autotune

        def autotune(*args, generate_configs=None, **kwargs):
            decorator = stock_autotune(*args, **kwargs)
            if generate_configs is None:
                return decorator

            def generated(fn):
                tuner = decorator(fn)
                tuner.__class__ = _generated_configs_autotuner(autotuner.Autotuner)
                tuner.generate_configs = generate_configs
                return tuner

            return generated

        autotune._copyfix_patched = True
        autotune.__wrapped__ = stock_autotune
        autotuner.autotune = autotune
        triton.runtime.autotune = autotune
        triton.autotune = autotune


# The config keys each generate_configs name's kernel reads (flag_gems 5.0.2 and main
# 2026-08-21 kunlunxin ops/mm.py, bmm.py, addmm.py).
GENERATED_CONFIG_KEYS = {
    "mm": ("BLOCK_M", "BLOCK_N", "BLOCK_K"),
    "bmm": ("TILE_M", "TILE_N", "TILE_K"),
    "addmm": ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K"),
}
# Tile bounds: at least 16 (tl.dot's smallest), at most 64: two 64x64 fp32 operand
# tiles over 3 pipeline stages take 96 KiB of shared memory (an H200 block gets 227).
MIN_TILE, MAX_TILE = 16, 64


def _tile(extent: int) -> int:
    tile = 1 << max(0, int(extent) - 1).bit_length()  # next power of two
    return max(MIN_TILE, min(MAX_TILE, tile))


def generated_config(name: str, args: dict):
    """The one config the generate_configs stand-in gives a launch of ``name``'s
    kernel with arguments ``args`` (M, N, K among them)."""
    import triton

    keys = GENERATED_CONFIG_KEYS.get(name)
    if keys is None:
        raise NotImplementedError(
            f"triton.autotune(generate_configs={name!r}) is FlagTree's XPU autotuner; "
            f"copyfix.emulation generates configs for {sorted(GENERATED_CONFIG_KEYS)} only"
        )
    tiles = [_tile(args[dim]) for dim in ("M", "N", "K")]
    return triton.Config(dict(zip(keys, tiles)))


_GENERATED_AUTOTUNER = {}


def _generated_configs_autotuner(stock):
    """A subclass of ``stock`` (Triton's Autotuner, so FlagGems' LibEntry still
    recognises it) whose every run takes its one config from generated_config."""
    cls = _GENERATED_AUTOTUNER.get(stock)
    if cls is None:

        class GeneratedConfigsAutotuner(stock):
            def run(self, *args, **kwargs):
                given = {**dict(zip(self.arg_names, args)), **kwargs}
                self.configs = [generated_config(self.generate_configs, given)]
                return super().run(*args, **kwargs)

        cls = _GENERATED_AUTOTUNER[stock] = GeneratedConfigsAutotuner
    return cls


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
