"""Shims that let stock Triton accept the kunlunxin sources (cpu and cuda modes)."""

from __future__ import annotations

import functools
import re
import sys
import types

from .state import patch

# XPU Triton's compile options, which the kunlunxin launches pass: dropped where the
# kernel does not declare them (the emulation checks results, not XPU codegen).
XPU_LAUNCH_OPTIONS = frozenset(
    "buffer_size_limit unroll_num is_use_mask_zero isCLOSE_TTXPU_O_ATOMIC_SIM "
    "groups_per_cluster is_sdnn".split()
)
_XPU_LAUNCH_OPTION_RE = re.compile(r"^is(Close|Open)[A-Z]\w*$")

# XPU-only libdevice names the kunlunxin sources read: stubs that raise when called.
XPU_ONLY_LIBDEVICE = tuple(
    "xpu_trunc_div fast_erf fast_gelu fast_sigmoid fast_tanh".split()
)


def libdevice_builtin(fn, name: str):
    """``fn`` as ``triton.language.extra.xpu.libdevice.<name>``.  Triton 3.6 accepts
    only JIT functions and builtins among a kernel's globals: marked as a builtin, it
    is called as it is, at compile or (interpreter) run time."""
    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = "triton.language.extra.xpu.libdevice"
    fn.__triton_builtin__ = True
    return fn


def _xpu_only_stub(name: str):
    def stub(*args, **kwargs):
        raise NotImplementedError(
            f"triton.language.extra.xpu.libdevice.{name} exists only in KunlunXIN's Triton; "
            "copyfix.emulation provides no emulation of it"
        )

    return libdevice_builtin(stub, name)


def strip_xpu_launch_options(jit_fn, kwargs: dict) -> dict:
    declared = set(jit_fn.arg_names)
    xpu = lambda k: k in XPU_LAUNCH_OPTIONS or _XPU_LAUNCH_OPTION_RE.match(k)
    return {k: v for k, v in kwargs.items() if k in declared or not xpu(k)}


def patch_triton_common() -> None:
    import triton
    import triton.language.extra as tl_extra
    import triton.runtime.autotuner as autotuner
    from triton.language.extra.cuda import libdevice as cuda_libdevice

    # --- triton.language.extra.xpu, which flag_gems imports for kunlunxin
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
            if getattr(value, "__module__", None) == cuda_libdevice.__name__:
                setattr(libdevice, name, value)
        for name in XPU_ONLY_LIBDEVICE:
            if not hasattr(libdevice, name):
                setattr(libdevice, name, _xpu_only_stub(name))
        xpu.libdevice = libdevice
        sys.modules[xpu.__name__] = xpu
        sys.modules[libdevice.__name__] = libdevice
        tl_extra.xpu = xpu

    # --- triton 3.6 autotune(generate_configs="mm") stands for FlagTree's XPU
    # autotuner: each launch gets ONE config from its shape (generated_config).
    @patch(autotuner, "autotune")
    def autotune(stock_autotune):
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

        return autotune

    triton.runtime.autotune = triton.autotune = autotune


# The config keys each generate_configs name's kernel reads (kunlunxin mm, bmm, addmm).
GENERATED_CONFIG_KEYS = {
    "mm": ("BLOCK_M", "BLOCK_N", "BLOCK_K"),
    "bmm": ("TILE_M", "TILE_N", "TILE_K"),
    "addmm": ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K"),
}
# Tiles in [16 (tl.dot's smallest), 64 (two fp32 tiles x 3 stages: 96 KiB shared)].
MIN_TILE, MAX_TILE = 16, 64


def generated_config(name: str, args: dict):
    """The config for a launch of ``name``'s kernel with arguments ``args`` (M, N, K):
    the next power of two of each, in [MIN_TILE, MAX_TILE]; a dimension that is no
    power of two gets a tile that does not divide it (the masked paths run)."""
    import triton

    keys = GENERATED_CONFIG_KEYS.get(name)
    if keys is None:
        raise NotImplementedError(
            f"triton.autotune(generate_configs={name!r}) is FlagTree's XPU autotuner; "
            f"copyfix.emulation generates configs for {sorted(GENERATED_CONFIG_KEYS)} only"
        )
    tiles = [1 << max(0, int(args[dim]) - 1).bit_length() for dim in "MNK"]
    tiles = [max(MIN_TILE, min(MAX_TILE, tile)) for tile in tiles]
    return triton.Config(dict(zip(keys, tiles)))


@functools.cache
def _generated_configs_autotuner(stock):
    """``stock`` (Triton's Autotuner, which LibEntry recognises) on generated_config."""

    class GeneratedConfigsAutotuner(stock):
        def run(self, *args, **kwargs):
            given = {**dict(zip(self.arg_names, args)), **kwargs}
            self.configs = [generated_config(self.generate_configs, given)]
            return super().run(*args, **kwargs)

    return GeneratedConfigsAutotuner


def patch_triton_jit_run() -> None:
    from triton.runtime.jit import JITFunction

    # --- triton 3.6 JITFunction.run raises on undeclared keyword arguments: drop the
    # XPU-only launch options (and only those)
    @patch(JITFunction, "run")
    def _(stock_run):
        def run(self, *args, grid, warmup, **kwargs):
            kwargs = strip_xpu_launch_options(self, kwargs)
            return stock_run(self, *args, grid=grid, warmup=warmup, **kwargs)

        return run
