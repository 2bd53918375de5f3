"""Run FlagGems' KunlunXIN (``_kunlunxin``) code path without KunlunXIN hardware.

Harness code, not part of the upstream PR.

Modes
-----
``native``
    A KunlunXIN XPU is present: nothing is patched, FlagGems runs as shipped.
``cuda``
    Stock Triton on an NVIDIA GPU with ``GEMS_VENDOR=kunlunxin``.  Only what stock
    Triton cannot accept from the kunlunxin sources is patched: the missing
    ``triton.language.extra.xpu.libdevice`` module, ``triton.autotune(generate_configs=...)``
    and the XPU-only launch options (``buffer_size_limit=...``, ``isClose*=...``).
``cpu``
    ``TRITON_INTERPRET=1`` on CPU tensors with ``GEMS_VENDOR=kunlunxin``.  In addition
    to the ``cuda`` patches, the Triton interpreter is made acceptable to FlagGems
    (a ``JITFunction`` that runs on the interpreter, CPU device guards, LibEntry
    without a per-device compiled-kernel cache) and its casts to/from bfloat16 are
    made exact (round to nearest even, as hardware and torch do).

Call :func:`activate` *before* ``import flag_gems``.

Rules this module keeps
-----------------------
* Every patch of a third-party internal lives here, under a comment that names the
  internal, why it is patched, and the version it was written for.  :func:`activate`
  refuses (``RuntimeError``) to patch versions it was not written for; see
  :data:`SUPPORTED_VERSIONS`.
* Emulation is faithful: a patch may make the emulator *work*, never make a wrong
  result look right.  Functions that exist only on XPU are stubs that raise.

Fault injection
---------------
:func:`xpu_fallback_failure` makes torch's native *strided* copy (the fallback that
the kunlunxin ``copy_`` redispatches to) fail exactly as it does on KunlunXIN, where
the native non-contiguous elementwise kernel is missing: ``torch.AcceleratorError:
CUDA error: invalid device function``.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import sys
import tempfile
import threading
import types
import warnings
from pathlib import Path
from typing import Iterator

MODES = ("cpu", "cuda", "native")
ENV_MODE = "COPYFIX_EMULATION"

# Versions the patches below were written for and checked against.  A version is
# accepted when its public part (before any "+local" suffix) starts with one of the
# prefixes.  torch 2.13.0 is the CPU development build, torch 2.11.x is on the GPU box.
SUPPORTED_VERSIONS = {
    "torch": ("2.13.0", "2.11."),
    "triton": ("3.6.0",),
    "flag_gems": ("5.0.2",),
}
# Which libraries each mode patches (and therefore checks).  flag_gems is always
# checked: copy_module() relies on its module layout.
_CHECKED_IN_MODE = {
    "cpu": ("torch", "triton", "flag_gems"),
    "cuda": ("torch", "triton", "flag_gems"),
    "native": ("flag_gems",),
}

# Module name under which FlagGems imports the kunlunxin ops: flag_gems.runtime.backend
# puts the backend folder on sys.path and imports "_kunlunxin.ops" (flag_gems 5.0.2,
# runtime/backend/__init__.py: import_vendor_extra_lib).
KUNLUNXIN_COPY_MODULE = "_kunlunxin.ops.copy"
# Where the kunlunxin copy.py lives inside the flag_gems package (flag_gems 5.0.2).
KUNLUNXIN_COPY_RELPATH = "runtime/backend/_kunlunxin/ops/copy.py"

# sha256 of the base kunlunxin copy.py files base_copy_module() accepts as pristine
# (the pre-images recorded in pyproject.toml [tool.copyfix.preimages]).
BASE_COPY_SHA256 = {
    "43886a575ea4b819b531686608e90c0d3439811584a28b2ab5355555dfa2baa1": "flag-gems 5.0.2 (PyPI)",
    "9387e1551d5d5ff5db7066bf8f146102032fc7bb2787ba05ff266b56ceb510bf": "FlagGems main 2026-08-21 (ed2508bc)",
}

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

MODE: str | None = None
_state = threading.local()  # .staging > 0 while the interpreter writes results back
_base_copy_module: types.ModuleType | None = None


# --------------------------------------------------------------------------- versions


def _public(version: str) -> str:
    return version.split("+", 1)[0]


def _flag_gems_version() -> str:
    try:
        return importlib.metadata.version("flag_gems")
    except importlib.metadata.PackageNotFoundError:
        pass
    spec = importlib.util.find_spec("flag_gems")  # locate without importing
    if spec is None or spec.origin is None:
        return "not installed"
    match = re.search(
        r'^__version__\s*=\s*["\']([^"\']+)["\']', Path(spec.origin).read_text(), re.M
    )
    return match.group(1) if match else "unknown"


def _installed_versions() -> dict[str, str]:
    """Versions of the libraries this module patches (the source the version check reads)."""
    import torch
    import triton

    return {
        "torch": torch.__version__,
        "triton": triton.__version__,
        "flag_gems": _flag_gems_version(),
    }


def versions() -> dict[str, str | None]:
    """torch / triton / flag_gems versions and the active emulation mode."""
    return {**_installed_versions(), "mode": MODE}


def _check_versions(mode: str) -> None:
    found = _installed_versions()

    def wanted(lib):
        return " or ".join(
            p + "*" if p.endswith(".") else p for p in SUPPORTED_VERSIONS[lib]
        )

    bad = [
        f"{lib} {found[lib]} (written for {wanted(lib)})"
        for lib in _CHECKED_IN_MODE[mode]
        if not any(_public(found[lib]).startswith(p) for p in SUPPORTED_VERSIONS[lib])
    ]
    if bad:
        raise RuntimeError(
            f"copyfix.emulation refuses to run in {mode!r} mode: its patches of library internals were "
            f"not written for {', '.join(bad)}. Re-check every patch in {__file__} against these "
            "versions, then update SUPPORTED_VERSIONS."
        )


# ------------------------------------------------------------------------ activation


def _detect_mode() -> str:
    if shutil.which("xpu-smi") or importlib.util.find_spec("torch_xmlir") is not None:
        return "native"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def current_mode() -> str | None:
    return MODE


def activate(mode: str | None = None) -> str:
    """Select and set up the emulation mode; call before ``import flag_gems``.

    ``mode`` is "cpu", "cuda" or "native"; None means ``$COPYFIX_EMULATION`` if set,
    else "native" when a KunlunXIN XPU is present, else "cuda" when torch sees a CUDA
    GPU, else "cpu".  Idempotent: a second call with the same (or no) mode returns the
    active mode; asking for another mode raises.  Returns the mode.

    In cpu mode this ends by importing flag_gems (the LibEntry patch needs the class).
    """
    global MODE
    if mode is None:
        mode = MODE or os.environ.get(ENV_MODE) or _detect_mode()
    if mode not in MODES:
        raise ValueError(f"unknown emulation mode {mode!r}; expected one of {MODES}")
    if MODE is not None:
        if mode != MODE:
            raise RuntimeError(
                f"emulation already active in {MODE!r} mode; cannot switch to {mode!r}"
            )
        return MODE
    _check_versions(mode)
    if mode != "native" and "flag_gems" in sys.modules:
        raise RuntimeError(
            "copyfix.emulation.activate() must run before `import flag_gems` (its kernels are defined at import time)"
        )
    if mode == "cpu":
        _setup_cpu_environment()
        _patch_triton_common()
        _patch_triton_interpreter()
        _patch_torch_cpu()
        _patch_flag_gems_cpu()
    elif mode == "cuda":
        import triton

        if triton.knobs.runtime.interpret:
            raise RuntimeError(
                "cuda emulation mode runs compiled Triton; unset TRITON_INTERPRET"
            )
        os.environ["GEMS_VENDOR"] = "kunlunxin"
        _patch_triton_common()
        _patch_triton_jit_run()
    MODE = mode
    return mode


def _require(*modes: str) -> str:
    if MODE is None:
        raise RuntimeError(
            "call copyfix.emulation.activate() first (before importing flag_gems)"
        )
    if modes and MODE not in modes:
        raise RuntimeError(
            f"not available in {MODE!r} mode (only in {', '.join(modes)})"
        )
    return MODE


def _setup_cpu_environment() -> None:
    os.environ["GEMS_VENDOR"] = "kunlunxin"
    # triton 3.6.0 triton.knobs.runtime.interpret reads TRITON_INTERPRET lazily, at each
    # triton.jit decoration: it must be set before flag_gems defines its kernels.
    os.environ["TRITON_INTERPRET"] = "1"
    # flag_gems 5.0.2 utils/libentry.py builds `libcache = LibCache(FLAGGEMS_DB_URL)` at import;
    # without $FLAGGEMS_DB_URL it names the sqlite file after torch.cuda.get_device_name(),
    # which fails without CUDA.  utils/code_cache.py writes generated kernels under
    # $FLAGGEMS_CACHE_DIR (default ~/.flaggems).  Give both a private directory.
    if "FLAGGEMS_CACHE_DIR" not in os.environ:
        os.environ["FLAGGEMS_CACHE_DIR"] = tempfile.mkdtemp(prefix="copyfix-flaggems-")
    if "FLAGGEMS_DB_URL" not in os.environ:
        db_dir = Path(os.environ["FLAGGEMS_CACHE_DIR"])
        db_dir.mkdir(parents=True, exist_ok=True)
        os.environ["FLAGGEMS_DB_URL"] = (
            f"sqlite:///{db_dir / 'copyfix_emulation_tuned_configs.db'}"
        )


def cache_dir() -> Path:
    """Directory where FlagGems writes its generated wrappers/kernels (code_cache/ below it)."""
    _require()
    return Path(os.environ.get("FLAGGEMS_CACHE_DIR") or (Path.home() / ".flaggems"))


# ------------------------------------------------------------ patches: cpu and cuda
# (cuda: libdevice, autotune, JITFunction.run; cpu: libdevice, autotune and the
# interpreter patches, whose JITFunction subclass strips the XPU launch options itself)


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


def _strip_xpu_launch_options(jit_fn, kwargs: dict) -> dict:
    """Drop the XPU-only launch options the kernel does not declare as parameters."""
    declared = set(jit_fn.arg_names)
    return {
        k: v for k, v in kwargs.items() if k in declared or not _is_xpu_launch_option(k)
    }


def _patch_triton_common() -> None:
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


def _patch_triton_jit_run() -> None:
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
                **_strip_xpu_launch_options(self, kwargs),
            )

        run._copyfix_patched = True
        run.__wrapped__ = stock_run
        JITFunction.run = run


# ------------------------------------------------------------------ patches: cpu only


def _patch_triton_interpreter() -> None:
    import numpy as np
    import torch
    import triton.language as tl
    from triton.runtime import interpreter
    from triton.runtime.jit import JITFunction

    if getattr(interpreter, "_copyfix_patched", False):
        return
    StockInterpretedFunction = interpreter.InterpretedFunction

    # --- triton 3.6.0 runtime/jit.py jit(): under TRITON_INTERPRET=1 it returns
    # `interpreter.InterpretedFunction(fn, **options)` (looked up in the interpreter
    # module at decoration time), which is not a JITFunction.  flag_gems 5.0.2 asserts
    # isinstance(fn, JITFunction) (pointwise_dynamic, LibEntry) and reads cache_key,
    # params, arg_names, __globals__.  This JITFunction subclass gets all of those from
    # JITFunction.__init__ (which compiles nothing) and runs every launch and device
    # call on the stock interpreter object.
    class InterpretedJITFunction(JITFunction):
        def __init__(self, fn, **options):
            super().__init__(fn, **options)
            self.interpreted = StockInterpretedFunction(fn, **options)
            self.pre_run_hooks = self.interpreted.pre_run_hooks  # one shared list

        def run(self, *args, grid, warmup, **kwargs):
            kwargs = _strip_xpu_launch_options(self, kwargs)
            return self.interpreted.run(*args, grid=grid, warmup=warmup, **kwargs)

        def __call__(self, *args, **kwargs):  # device-function call inside a kernel
            return self.interpreted(*args, **kwargs)

        def rewrite(self):
            return self.interpreted.rewrite()

        def __repr__(self):
            return f"InterpretedJITFunction({self.module}:{self.fn.__qualname__})"

    interpreter.InterpretedFunction = InterpretedJITFunction

    # --- triton 3.6.0 runtime/interpreter.py _patch_lang(fn): asserts that
    # triton.language is a global of every interpreted function, device functions
    # included.  kunlunxin ops/copy.py's scalar function `_copy_kernel(src)` lives in a
    # module that imports only `triton`.  It is only ever called from inside a kernel,
    # whose own _patch_lang already patched the (shared) triton.language module, so
    # there is nothing left to patch: return an empty scope instead of asserting.
    stock_patch_lang = interpreter._patch_lang

    def _patch_lang(fn):
        if not any(
            value is tl or value is tl.core for value in fn.__globals__.values()
        ):
            return interpreter._LangPatchScope()
        return stock_patch_lang(fn)

    interpreter._patch_lang = _patch_lang

    # --- triton 3.6.0 runtime/interpreter.py InterpreterBuilder.cast_impl: bfloat16 is
    # held as uint16 bit patterns; fp32->bf16 truncates (`_convert_float` with no
    # rounding), every other X->bf16 / bf16->X runs numpy astype on the raw bits
    # (garbage), and bf16->fp32 maps bf16 subnormals wrongly.  Hardware and torch round
    # to nearest even.  Replace the bf16 cases with exact arithmetic on the bit pattern;
    # everything else stays with the stock implementation.
    stock_cast_impl = interpreter.InterpreterBuilder.cast_impl

    def cast_impl(self, src, dst_type):
        src_ty, dst_ty = src.dtype.scalar, dst_type.scalar
        if src_ty == tl.bfloat16 and dst_ty != tl.bfloat16:
            value = bf16_bits_to_float32(src.data)
            if (
                dst_ty != tl.float32
            ):  # triton's semantic routes bf16->X through fp32; be safe
                value = value.astype(interpreter._get_np_dtype(dst_ty))
            return interpreter.TensorHandle(value, dst_ty)
        if dst_ty == tl.bfloat16 and src_ty != tl.bfloat16:
            if src_ty.is_fp8():  # fp8 reaches bf16 through create_fp_to_fp, not here
                return stock_cast_impl(self, src, dst_type)
            # int/bool/fp16/fp64 -> fp32 (exact or round-to-nearest-even, numpy as C does),
            # then fp32 -> bf16: the same two steps torch takes (c10::BFloat16 is built
            # from float) and Triton's NVIDIA lowering takes for int->bf16.
            return interpreter.TensorHandle(
                float32_to_bf16_bits(np.asarray(src.data).astype(np.float32)), dst_ty
            )
        return stock_cast_impl(self, src, dst_type)

    interpreter.InterpreterBuilder.cast_impl = cast_impl
    for name in (
        "create_si_to_fp",
        "create_ui_to_fp",
        "create_fp_to_si",
        "create_fp_to_ui",
        "create_fp_ext",
        "create_fp_trunc",
    ):
        # The stock class binds these as lambdas calling self.cast_impl: nothing to rebind,
        # but make sure that is still true for this Triton.
        if (
            "cast_impl"
            not in getattr(interpreter.InterpreterBuilder, name).__code__.co_names
        ):
            raise RuntimeError(
                f"triton interpreter's InterpreterBuilder.{name} no longer goes through cast_impl"
            )

    # --- triton 3.6.0 runtime/interpreter.py GridExecutor._restore_args_dev: after a
    # launch the interpreter writes its host copies back with `storage.copy_(host)`.
    # For CPU tensors the host copy *is* the tensor's storage (UntypedStorage.cpu()
    # returns self), so this is a self-copy and emulator plumbing, not a copy on the
    # device.  Mark it, so that cpu_dispatch() hands it to torch instead of routing it
    # through the kunlunxin copy_ (where spies, launch counts and fault injection would
    # see it).  The write-back itself is unchanged.
    stock_restore = interpreter.GridExecutor._restore_args_dev

    def _restore_args_dev(self, *args, **kwargs):
        _state.staging = getattr(_state, "staging", 0) + 1
        try:
            return stock_restore(self, *args, **kwargs)
        finally:
            _state.staging -= 1

    interpreter.GridExecutor._restore_args_dev = _restore_args_dev

    # --- triton 3.6.0 runtime/interpreter.py GridExecutor._init_args_hst: makes a host
    # tensor for every argument with data_ptr() through Tensor-only methods (new_empty,
    # storage_offset, set_).  flag_gems' StridedBuffer (utils/tensor_wrapper.py, the
    # argument type of every pointwise_dynamic launch through __call__) has data_ptr()
    # and dtype, which is all a kernel argument needs, but not those methods, and may
    # describe negative strides no tensor view can.  A CPU-resident one needs no host
    # copy at all (the interpreter reads and writes memory through data_ptr()), so it is
    # passed through as is.  The write-back (above) then copies its storage onto itself.
    stock_init = interpreter.GridExecutor._init_args_hst

    def _passes_through(arg):
        if isinstance(arg, torch.Tensor) or not hasattr(arg, "data_ptr"):
            return False
        storage = getattr(arg, "untyped_storage", None)
        return storage is not None and getattr(
            storage(), "device", None
        ) == torch.device("cpu")

    def _init_args_hst(self, args_dev, kwargs):
        kept = {i: a for i, a in enumerate(args_dev) if _passes_through(a)}
        kept_kw = {k: a for k, a in kwargs.items() if _passes_through(a)}
        args_hst, kwargs_hst = stock_init(
            self,
            [None if i in kept else a for i, a in enumerate(args_dev)],
            {k: (None if k in kept_kw else a) for k, a in kwargs.items()},
        )
        for i, a in kept.items():
            args_hst[i] = a
        kwargs_hst.update(kept_kw)
        return args_hst, kwargs_hst

    interpreter.GridExecutor._init_args_hst = _init_args_hst

    interpreter._copyfix_patched = True


def float32_to_bf16_bits(values):
    """bfloat16 bit patterns (uint16) of float32 values, rounded to nearest even.

    Overflow rounds to +-inf as in torch/hardware.  NaN becomes the canonical quiet NaN
    0x7FFF (what NVIDIA's cvt.rn.bf16.f32 gives; torch's CPU paths give 0xFFFF or 0x7FC0
    depending on vectorisation, so NaN payloads are not comparable bit for bit).
    """
    import numpy as np

    values = np.ascontiguousarray(values, dtype=np.float32)
    bits = values.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    rounded[np.isnan(values)] = 0x7FFF
    return rounded.astype(np.uint16)


def bf16_bits_to_float32(bits):
    """float32 values of bfloat16 bit patterns (exact: bf16 is the top half of fp32)."""
    import numpy as np

    bits = np.ascontiguousarray(bits).view(np.uint16)
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _patch_torch_cpu() -> None:
    import torch

    # --- torch 2.13.0 (2.11.x) torch/cuda/__init__.py _DeviceGuard: flag_gems' generated
    # wrappers enter `torch_device_fn._DeviceGuard(in0.device.index)` (torch_device_fn is
    # torch.cuda for kunlunxin).  CPU tensors have device.index None, which
    # torch.cuda._exchange_device rejects; -1 is torch's own "no device" index, for
    # which it does nothing.  Only None is mapped; any other index behaves as before.
    stock_guard = torch.cuda._DeviceGuard
    if getattr(stock_guard, "_copyfix_patched", False):
        return

    class _DeviceGuard(stock_guard):
        _copyfix_patched = True

        def __init__(self, index):
            super().__init__(-1 if index is None else index)

    torch.cuda._DeviceGuard = _DeviceGuard


def _patch_flag_gems_cpu() -> None:
    # flag_gems.utils.libentry imports flag_gems itself, so the LibEntry patch can only be
    # applied after `import flag_gems`: do that import here, with the environment and
    # the Triton/torch patches above already in place.  No kernel runs during the import.
    import flag_gems  # noqa: F401

    # (the attribute flag_gems.utils.libentry is the decorator function, not the module)
    _patch_libentry(sys.modules["flag_gems.utils.libentry"])
    _register_on_cpu(flag_gems)


def _register_on_cpu(flag_gems) -> None:
    # --- flag_gems 5.0.2 runtime/backend/device.py DeviceDetector (a singleton) holds
    # `dispatch_key` ("CUDA" for kunlunxin, from device_name "cuda"), which
    # runtime/register.py Register uses as the torch.library key for enable()/use_gems();
    # flag_gems/__init__.py copies device_name into `flag_gems.device`.  In cpu mode the
    # emulated device *is* the CPU: registering under "CPU" makes
    # `flag_gems.use_gems(include=[...])` reach CPU tensors, and `flag_gems.device`
    # tells tests where to put them.  Only what a test asks use_gems for is registered.
    from flag_gems.runtime.backend.device import DeviceDetector

    DeviceDetector().dispatch_key = "CPU"
    flag_gems.device = "cpu"


def _patch_libentry(libentry_module) -> None:
    # --- flag_gems 5.0.2 utils/libentry.py LibEntry.run: caches the object returned by
    # the first `self.fn.run(...)` as a compiled kernel per torch.cuda.current_device()
    # (in a tuple sized by torch.cuda.device_count()) and launches that kernel directly
    # afterwards.  The interpreter compiles nothing (run returns None) and there is no
    # CUDA device.  Under the interpreter every launch goes to self.fn.run, which is what
    # the first, uncached launch does anyway.
    LibEntry = libentry_module.LibEntry
    if getattr(LibEntry.run, "_copyfix_patched", False):
        return

    def run(self, *args, **kwargs):
        return self.fn.run(*args, **kwargs), {}

    run._copyfix_patched = True
    run.__wrapped__ = LibEntry.run
    LibEntry.run = run


# --------------------------------------------------------------------- public helpers


def copy_module() -> types.ModuleType:
    """The kunlunxin copy module FlagGems dispatches to: ``sys.modules["_kunlunxin.ops.copy"]``.

    (Importing flag_gems.runtime.backend._kunlunxin.ops.copy would execute a second copy
    of the file, with its own kernels; never do that.)
    """
    _require()
    import flag_gems  # noqa: F401  (imports the vendor ops)

    module = sys.modules.get(KUNLUNXIN_COPY_MODULE)
    if module is None:
        raise RuntimeError(
            f"{KUNLUNXIN_COPY_MODULE} is not loaded: flag_gems did not select the kunlunxin backend "
            f"(GEMS_VENDOR={os.environ.get('GEMS_VENDOR')!r})"
        )
    _check_copy_module(module)
    return module


def _check_copy_module(module) -> None:
    for name in ("copy", "copy_", "_copy_kernel"):
        if not hasattr(module, name):
            raise RuntimeError(f"{module.__name__} ({module.__file__}) has no {name}")
    config = module._copy_kernel.config
    if config.prefer_1d_tile is not True:
        raise RuntimeError(
            f"{module.__name__}._copy_kernel does not use the kunlunxin 1-D tile codegen config "
            f"(prefer_1d_tile={config.prefer_1d_tile!r}); is GEMS_VENDOR=kunlunxin?"
        )


def base_copy_module() -> types.ModuleType:
    """The pristine base (PyPI flag-gems 5.0.2) kunlunxin copy module.

    When this flag_gems is the repo's composed overlay and the overlay replaced
    ``_kunlunxin/ops/copy.py``, the base file is executed as a *separate* module object
    (named ``_kunlunxin.ops._copyfix_base_copy``, not entered in sys.modules) whose
    relative imports resolve to the same ``_kunlunxin`` package, so its globals are the
    base file's own.  The base file is found at ``flag_gems._overlay_info.BASE_COPY_PATH``
    if the build records it, else at the pre-image the build keeps under
    ``flag_gems/_overlay_preimages/``.  Without an overlay of copy.py, the installed
    module is the base: :func:`copy_module` is returned.  Either way the file must hash
    to one of :data:`BASE_COPY_SHA256`, else RuntimeError.
    """
    global _base_copy_module
    current = copy_module()
    if _base_copy_module is not None:
        return _base_copy_module
    path = _base_copy_path()
    if path is None or Path(path).resolve() == Path(current.__file__).resolve():
        _check_base_file(current.__file__)
        return current
    _check_base_file(path)
    spec = importlib.util.spec_from_file_location(
        "_kunlunxin.ops._copyfix_base_copy", path
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _check_copy_module(module)
    _base_copy_module = module
    return module


def _check_base_file(path) -> None:
    import hashlib

    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    if digest not in BASE_COPY_SHA256:
        raise RuntimeError(
            f"{path} is not a known pristine base kunlunxin copy.py (sha256 {digest}; "
            f"known: {', '.join(BASE_COPY_SHA256.values())})"
        )


def _base_copy_path() -> str | None:
    try:
        info = importlib.import_module("flag_gems._overlay_info")
    except ModuleNotFoundError:
        return None
    path = getattr(info, "BASE_COPY_PATH", None)
    if path:
        return str(path)
    if KUNLUNXIN_COPY_RELPATH in getattr(info, "REPLACED", ()):
        import flag_gems

        preimage = (
            Path(flag_gems.__file__).parent
            / "_overlay_preimages"
            / KUNLUNXIN_COPY_RELPATH
        )
        if not preimage.is_file():
            raise RuntimeError(
                f"overlay replaced {KUNLUNXIN_COPY_RELPATH} but its pre-image {preimage} is missing"
            )
        return str(preimage)
    return None


def device() -> str:
    """Device string for tensors under test: "cpu" in cpu mode, else flag_gems.device."""
    if _require() == "cpu":
        return "cpu"
    import flag_gems

    return flag_gems.device


def _wrapped_number_tensor(value):
    import torch

    # torch boxes a wrapped-number tensor (a Python scalar promoted to a 0-dim CPU
    # tensor) back into a Python scalar when calling a Python kernel.  These are the
    # dtypes torch gives wrapped numbers.
    if isinstance(value, bool):
        return torch.tensor(value, dtype=torch.bool)
    if isinstance(value, int):
        return torch.tensor(value, dtype=torch.int64)
    if isinstance(value, float):
        return torch.tensor(value, dtype=torch.float64)
    if isinstance(value, complex):
        return torch.tensor(value, dtype=torch.complex128)
    return value


@contextlib.contextmanager
def cpu_dispatch(module: types.ModuleType | None = None) -> Iterator[None]:
    """Route ``aten::copy_`` on CPU tensors to the kunlunxin ``copy_`` (cpu mode).

    FlagGems' ``use_gems()`` registers its ops for the device's dispatch key, which CPU
    tensors never reach.  In cpu mode this registers, for the CPU key only and only
    while the context is open, a kernel that calls ``module.copy_`` (default
    :func:`copy_module`; looked up at each call, so a spy patched onto the module sees
    the calls).  The kunlunxin ``copy_``'s own fallback,
    ``torch.ops.aten.copy_.default.redispatch(DispatchKeySet(CompositeExplicitAutograd), ...)``,
    dispatches on an empty key set, which reaches torch's CompositeExplicitAutograd
    kernel directly, never this CPU override.

    Two kinds of CPU-side copies are not device traffic and go straight to torch's
    implementation: CPU-internal scalar conversions (torch calling ``copy_`` with a
    Python number as ``src``, a wrapped-number tensor, e.g. while printing a tensor)
    and the Triton interpreter writing a launch's results back to the tensors.

    In cuda and native modes this is ``flag_gems.use_gems()`` (and ``module``, if given,
    must be :func:`copy_module`).
    """
    import torch

    if _require() != "cpu":
        import flag_gems

        if module is not None and module is not copy_module():
            raise ValueError(
                f"in {MODE!r} mode copy_ is dispatched by flag_gems.use_gems() to {KUNLUNXIN_COPY_MODULE}; "
                "another module cannot be routed (call its copy_ directly)"
            )
        with flag_gems.use_gems():
            yield
        return
    target = module if module is not None else copy_module()
    _check_copy_module(target)
    native_keyset = torch._C.DispatchKeySet(
        torch._C.DispatchKey.CompositeExplicitAutograd
    )

    # The operator's C++ handle, found afresh: bypasses OpOverload.redispatch, so neither
    # a test's mock of it nor xpu_fallback_failure() sees the bypassed calls.
    native = torch._C._dispatch_find_schema_or_throw("aten::copy_", "")

    def copy_(dst, src, non_blocking=False):
        if getattr(_state, "staging", 0):  # the interpreter's write-back (see above)
            return native.redispatch_boxed(native_keyset, dst, src, non_blocking)
        if not isinstance(src, torch.Tensor):  # a CPU-internal wrapped number
            return native.redispatch_boxed(
                native_keyset, dst, _wrapped_number_tensor(src), non_blocking
            )
        return target.copy_(dst, src, non_blocking)

    # torch 2.13.0 (2.11.x): torch.library.Library("aten", "IMPL").impl(name, fn, "CPU")
    # registers a Python kernel for one dispatch key; destroying the library object
    # removes it.  torch warns that it overrides the built-in CPU kernel: expected here.
    lib = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*[Oo]verrid.*")
            lib.impl("copy_", copy_, "CPU")
        yield
    finally:
        lib._destroy()


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
