"""The cpu emulation: the kunlunxin code path on Triton's interpreter, on CPU tensors.

(``COPYFIX_CPU_VENDOR=nvidia``: FlagGems' default backend on the same interpreter, with
the vendor-neutral patches only; see :func:`patch_triton_interpreter`.)

Besides the shims every mode gets, the interpreter is made acceptable to FlagGems
(a ``JITFunction`` that runs on the interpreter, CPU device guards, LibEntry on the
interpreter), its conversions are made to match compiled Triton's, and
:func:`cpu_dispatch` routes ``Tensor.copy_`` on CPU tensors to the kunlunxin op.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import re
import sys
import tempfile
import threading
import types
import warnings
from pathlib import Path
from typing import Iterator

import numpy as np

from . import toolchain
from .kunlunxin import KUNLUNXIN_COPY_MODULE, _check_copy_module, copy_module
from .shims import strip_xpu_launch_options
from .state import require

_state = threading.local()  # .staging > 0 while the interpreter writes results back
# Triton's interpreter patches triton.language module-wide while it runs a grid
# (runtime/interpreter.py GridExecutor, _patch_lang): two grids run from two threads
# would tread on each other.  A device runs one stream's kernels in order anyway;
# the emulated device runs one grid at a time (host code around it stays concurrent).
_GRID_LOCK = threading.RLock()


# --- triton 3.0-3.6 runtime/jit.py JITFunction.run returns the CompiledKernel it
# launched; flag_gems' LibEntry (5.0.2 and main) caches it and launches it later as
# `kernel[grid](*args)` (compiler/compiler.py CompiledKernel.__getitem__).  The
# launcher's convention depends on the version (each wheel's jit.py JITFunction.run,
# compiler.py CompiledKernel and nvidia driver.py):
# - 3.0-3.2: `kernel.run(gx, gy, gz, stream, function, packed_metadata, meta, enter,
#   exit, *non_constexpr_args)`: the constexprs are baked into the compiled kernel and
#   are not passed; LibEntry passes only the others on these versions;
# - 3.3-3.6: the same, with every parameter in signature order, constexprs included
#   (the launcher skips them: their values are the baked ones);
# - the launch hooks are CompiledKernel.launch_enter_hook/launch_exit_hook (class
#   attributes) up to 3.3, knobs.runtime's from 3.4 (None by default on 3.4, an empty
#   HookChain on 3.5-3.6).
# PR 3's launch cache (flag_gems/utils/launch_cache.py) launches the compiled kernel
# itself through that convention.  The interpreter compiles nothing and returns None.
# InterpretedKernel stands in for the CompiledKernel: the same launch protocol (launch
# hooks included), run on the interpreter, and at least as strict as the compiled
# launcher: the argument count of the version's convention, the handles it was given,
# and constexpr values equal to the ones it was "compiled" with (a compiled kernel
# would silently use its baked values; this one refuses).
@functools.cache
def _triton_version() -> tuple[int, int]:
    import triton

    major, minor = triton.__version__.split(".")[:2]
    return int(major), int(minor)


def constexprs_in_launch() -> bool:
    """Whether this Triton's launcher takes the constexpr parameters too (3.3+)."""
    return _triton_version() >= (3, 3)


def hook_holder():
    """What holds this Triton's launch hooks (launch_enter_hook, launch_exit_hook)."""
    if _triton_version() >= (3, 4):
        from triton import knobs

        return knobs.runtime
    from triton.compiler.compiler import CompiledKernel

    return CompiledKernel


def launch_hooks():
    """(enter, exit) launch hooks where this Triton keeps them."""
    holder = hook_holder()
    return holder.launch_enter_hook, holder.launch_exit_hook


class InterpretedKernel:
    packed_metadata = ("copyfix-interpreted",)

    def __init__(self, jit_fn, constexprs):
        self.jit_fn = jit_fn
        self.function = jit_fn  # what the launcher launches: checked at each launch
        self.constexprs = constexprs  # {name: value} it was "compiled" with

    def launch_metadata(self, grid, stream, *args):
        return {"name": self.jit_fn.__name__, "stream": stream}

    def _all_args(self, args):
        params = self.jit_fn.params
        if constexprs_in_launch():
            taken, what = params, "every parameter, constexprs included"
        else:
            taken = [p for p in params if not p.is_constexpr]
            what = "its non-constexpr parameters"
        if len(args) != len(taken):
            raise TypeError(
                f"{self.jit_fn!r} launched with {len(args)} arguments; the compiled "
                f"kernel takes {len(taken)} ({what})"
            )
        given = dict(zip((p.name for p in taken), args))
        for name, baked in self.constexprs.items():
            if name in given and not _same_constexpr(given[name], baked):
                raise TypeError(
                    f"{self.jit_fn!r} launched with constexpr {name}={given[name]!r}; "
                    f"it was compiled for {baked!r}"
                )
        return [
            self.constexprs[p.name] if p.is_constexpr else given[p.name] for p in params
        ]

    def run(
        self, gx, gy, gz, stream, function, packed_metadata, meta, enter, leave, *args
    ):
        if function is not self.function or packed_metadata is not self.packed_metadata:
            raise TypeError(f"{self.jit_fn!r} launched with another kernel's handles")
        args = self._all_args(args)
        if enter is not None:
            enter(meta)
        with _GRID_LOCK, _in_grid(), toolchain.launch():
            function.interpreted.run(*args, grid=(gx, gy, gz), warmup=False)
        if leave is not None:
            leave(meta)

    def __getitem__(self, grid):
        def runner(*args):
            enter, leave = launch_hooks()
            meta = self.launch_metadata(grid, None, *args)
            self.run(grid[0], grid[1], grid[2], None, self.function,
                     self.packed_metadata, meta, enter, leave, *args)  # fmt: skip

        return runner


@contextlib.contextmanager
def _in_grid() -> Iterator[None]:
    """Around one interpreted launch: device-function calls may run (see
    patch_triton_interpreter, JITFunction.__call__)."""
    grids = getattr(_state, "grids", 0)
    if not grids:  # the modules this launch patched (patch_triton_interpreter)
        _state.patched_langs = set()
    _state.grids = grids + 1
    try:
        yield
    finally:
        _state.grids -= 1
        if not _state.grids:
            _state.patched_langs = set()


def _same_constexpr(a, b) -> bool:
    return type(a) is type(b) and a == b


def import_triton_uninterpreted() -> None:
    """Import Triton with TRITON_INTERPRET unset, before anything else imports it.

    A child process (an xdist worker) inherits TRITON_INTERPRET=1 from a parent whose
    cpu emulation's activation set it. Set at `import triton`, it turns Triton's own @jit
    library functions into stock InterpretedFunction objects, which the JITFunction
    stand-in of patch_triton_interpreter cannot reference ("Unsupported function
    referenced"). setup_cpu_environment sets it again afterwards.
    """
    if "triton" not in sys.modules:
        os.environ.pop("TRITON_INTERPRET", None)
        import triton  # noqa: F401


def setup_cpu_environment(vendor: str = "kunlunxin") -> None:
    # FlagGems' backend: kunlunxin, or (COPYFIX_CPU_VENDOR=nvidia) its default one
    os.environ["GEMS_VENDOR"] = vendor
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


def patch_triton_interpreter(vendor: str = "kunlunxin") -> None:
    """Triton's interpreter made to run FlagGems as compiled Triton would: the patches
    below, in this order, vendor-neutral but for the XPU launch options dropped (only
    the kunlunxin sources pass them) and triton.language's repatching skipped."""
    from triton.runtime import interpreter

    if getattr(interpreter, "_copyfix_patched", False):
        return
    stock = interpreter.InterpretedFunction
    _jit_function_on_the_interpreter(interpreter, stock, vendor == "kunlunxin")
    if _triton_version() >= (3, 6):
        _library_jit_calls_inside_a_launch(stock)
    _patch_lang_of_device_functions(
        interpreter, vendor != "kunlunxin" and hasattr(interpreter, "_LangPatchScope")
    )
    _casts_as_compiled_triton(interpreter)
    _storage_self_copies_left_alone()
    _write_back_staged(interpreter)
    _strided_buffers_pass_through(interpreter)
    if _triton_version() < (3, 3):
        _only_scalars_branch(interpreter)
    if _triton_version() >= (3, 6):
        _bool_and_float_arguments_as_compiled(interpreter)
    interpreter._copyfix_patched = True


# --- triton 3.6.0 runtime/jit.py jit(): under TRITON_INTERPRET=1 it returns
# `interpreter.InterpretedFunction(fn, **options)` (looked up in the interpreter
# module at decoration time), which is not a JITFunction.  flag_gems 5.0.2 asserts
# isinstance(fn, JITFunction) (pointwise_dynamic, LibEntry) and reads cache_key,
# params, arg_names, __globals__.  This JITFunction subclass gets all of those from
# JITFunction.__init__ (which compiles nothing) and runs every launch and device
# call on the stock interpreter object.
def _jit_function_on_the_interpreter(interpreter, stock, strips_xpu_options) -> None:
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    class InterpretedJITFunction(JITFunction):
        def __init__(self, fn, **options):
            super().__init__(fn, **options)
            self.interpreted = stock(fn, **options)
            # 3.6's interpreter runs the pre-run hooks itself (one shared list);
            # before 3.6 it has none, and this object runs JITFunction's own list
            # as compiled Triton's JITFunction.run does
            stock_hooks = getattr(self.interpreted, "pre_run_hooks", None)
            self._runs_hooks = stock_hooks is None
            if stock_hooks is not None:
                self.pre_run_hooks = stock_hooks

        def run(self, *args, grid, warmup, **kwargs):
            if strips_xpu_options:
                kwargs = strip_xpu_launch_options(self, kwargs)
            if self._runs_hooks:
                for hook in self.pre_run_hooks:
                    hook(*args, **kwargs)
            with _GRID_LOCK, _in_grid(), toolchain.launch():
                self.interpreted.run(*args, grid=grid, warmup=warmup, **kwargs)
            return InterpretedKernel(self, self._constexprs(args, kwargs))

        def _constexprs(self, args, kwargs):
            baked = {}
            for p in self.params:
                if not p.is_constexpr:
                    continue
                if p.num < len(args):
                    baked[p.name] = args[p.num]
                elif p.name in kwargs:
                    baked[p.name] = kwargs[p.name]
                elif p.default is not inspect.Parameter.empty:
                    baked[p.name] = p.default
            return baked

        def __call__(self, *args, **kwargs):  # device-function call inside a kernel
            # --- triton 3.6.0 compiler/code_generator.py (call_JitFunction): a
            # device function's arguments that are no Triton values become
            # constexprs, so `get_dtype_min(x.type.element_ty)` (flag_gems
            # utils/limits.py, 5.0.2 and main: argmax, max, ...) reads `dtype.value`.
            # The interpreter passes the bare tl.dtype ("'dtype' object has no
            # attribute 'value'").  Wrap dtypes (only) as the compiler does.
            args = [tl.constexpr(a) if isinstance(a, tl.dtype) else a for a in args]
            kwargs = {
                k: tl.constexpr(a) if isinstance(a, tl.dtype) else a
                for k, a in kwargs.items()
            }
            return self.interpreted(*args, **kwargs)

        def rewrite(self):  # (3.2+: the interpreter rewrites the function's AST)
            return self.interpreted.rewrite()

        def __repr__(self):
            return f"InterpretedJITFunction({self.module}:{self.fn.__qualname__})"

    interpreter.InterpretedFunction = InterpretedJITFunction


# --- triton 3.6.0 runtime/jit.py JITFunction.__call__ raises "Cannot call
# @triton.jit'd outside of the scope of a kernel" (patched on 3.6 only: the
# Triton matrix, 3.0-3.5, was checked without it).  Triton is imported without
# TRITON_INTERPRET (import_triton_uninterpreted), so its own @jit library functions
# (language/standard.py: tl.cdiv, tl.sum, tl.sigmoid, ...) are plain
# JITFunctions, not the stock InterpretedFunctions an interpreted import would
# make; a kernel calling one (the generic pointwise_dynamic's kernels call tl.cdiv
# in every launch) fails on the interpreter where compiled Triton inlines it.
# Inside an interpreted launch (and only there) such a call runs the function on
# the stock interpreter, as an interpreted import would; outside one it raises as
# before: what compiled Triton does, so no device failure is hidden.  Both
# variants: the kunlunxin reductions (sum, mean, any) and isin call Triton's
# library functions (tl.sum, tl.cdiv, ...) the same way.
def _library_jit_calls_inside_a_launch(stock) -> None:
    from triton.runtime.jit import JITFunction

    if getattr(JITFunction.__call__, "_copyfix_patched", False):
        return
    stock_jit_call = JITFunction.__call__

    def jit_call(self, *args, **kwargs):
        if not getattr(_state, "grids", 0):
            return stock_jit_call(self, *args, **kwargs)
        interpreted = self.__dict__.get("_copyfix_interpreted")
        if interpreted is None:
            interpreted = stock(self.fn)
            self._copyfix_interpreted = interpreted
        return interpreted(*args, **kwargs)

    jit_call._copyfix_patched = True
    jit_call.__wrapped__ = stock_jit_call
    JITFunction.__call__ = jit_call


# --- triton 3.6.0 runtime/interpreter.py _patch_lang(fn): asserts that
# triton.language is a global of every interpreted function, device functions
# included.  kunlunxin ops/copy.py's scalar function `_copy_kernel(src)` lives in a
# module that imports only `triton`.  It is only ever called from inside a kernel,
# whose own _patch_lang already patched the (shared) triton.language module, so
# there is nothing left to patch: return an empty scope instead of asserting.
#
# --- (same function, triton 3.6.0) the stock interpreter patches triton.language
# again at every device-function call (InterpretedFunction.__call__), with the same
# interpreted members the running grid's own _patch_lang set, and never restores a
# device call's patches (it drops the scope): pure repetition, about half of the
# nvidia variant's tiny decode (flag_gems ops/isin.py calls a device function in a
# loop; a generate took 19 s with it, 10 s without).  With ``skips_repatching``,
# within one interpreted launch, a module the launch already patched
# (triton.language or triton.language.core) is not patched again; the launch's own
# scope restores it at the end as before.  nvidia variant on 3.6 only (the kunlunxin
# variant and the Triton matrix were checked without it).
def _patch_lang_of_device_functions(interpreter, skips_repatching: bool) -> None:
    import triton.language as tl

    stock_patch_lang = interpreter._patch_lang

    def _patch_lang(fn):
        if not any(
            value is tl or value is tl.core for value in fn.__globals__.values()
        ):
            # (3.6 returns the scope it patched in; before 3.6 nothing is returned)
            scope = getattr(interpreter, "_LangPatchScope", None)
            return scope() if scope is not None else None
        # 3.0-3.2 find triton.language with `value in [tl, tl.core]` over every
        # global, which calls __eq__ of objects that refuse a module (torch dtypes'
        # pybind __eq__ raises TypeError); 3.3+ look at modules only.  Show the stock
        # function the modules only: it reads nothing else of fn.
        modules = {k: v for k, v in fn.__globals__.items() if inspect.ismodule(v)}
        if skips_repatching and getattr(_state, "grids", 0):
            langs = {id(v) for v in modules.values() if v is tl or v is tl.core}
            if langs <= _state.patched_langs:
                return interpreter._LangPatchScope()
            _state.patched_langs |= langs
        return stock_patch_lang(types.SimpleNamespace(__globals__=modules))

    interpreter._patch_lang = _patch_lang


# --- triton 3.6.0 runtime/interpreter.py InterpreterBuilder.cast_impl: bfloat16 is
# held as uint16 bit patterns; fp32->bf16 truncates (`_convert_float` with no
# rounding), every other X->bf16 / bf16->X runs numpy astype on the raw bits
# (garbage), and bf16->fp32 maps bf16 subnormals wrongly.  Compiled Triton 3.6
# (NVIDIA lowering, measured on the H200: results/conversions_h200.json,
# docs/COPY_REPORT.md "Conversions") rounds every conversion into bf16 ONCE, to
# nearest even, from the exact source value: int->bf16 is one rounding of the
# integer (cvt.rn.bf16.s32/s64), not int->fp32->bf16 as torch does.  Replace the
# bf16 cases with exact arithmetic; everything else stays with the stock
# implementation (numpy astype), whose results for the other pairs match compiled
# Triton wherever C defines the conversion (same docs section; pinned by
# tests/tooling/test_conversions.py).
#
# Compiled Triton 3.6 also folds an integer -> float32 conversion followed by a
# truncation to a 16-bit float into ONE conversion (MLIR's arith canonicalization
# truncf(sitofp(x)) -> sitofp(x), and uitofp alike): `x.to(tl.float32)` stored into
# a bf16 pointer rounds the integer once, as the H200 shows ("via_fp32" in
# results/conversions_h200.json).  The interpreter runs the two steps apart, so an
# integer's float32 handle remembers the integers it came from, and a truncation
# of that very handle converts them directly.
#
# The KunlunXIN toolchain's conversion faults (copyfix.emulation.toolchain): each
# conversion is checked as compiled Triton emits it, after the fold above; a float16
# widened to float32 in the kernel still counts as float16 (Triton's semantic sends
# fp16 -> bf16 through float32).  A literal of the kernel's source (`x != 0`)
# reaches the interpreter as a constant of the builder's (get_int32 & co.), which
# the interpreter then converts at run time; a compiler folds it into a constant of
# the other type, so its conversions are not checked: the builder's constants (and
# their splats, broadcasts and expansions) carry a mark.
def _casts_as_compiled_triton(interpreter) -> None:
    import triton.language as tl

    builder = interpreter.InterpreterBuilder
    stock_cast_impl = builder.cast_impl
    fold_key, fp16_key = "copyfix_int_to_fp32_origin", "copyfix_fp16_origin"
    constant_key = "copyfix_constant"

    def cast_impl(self, src, dst_type):
        src_ty, dst_ty = src.dtype.scalar, dst_type.scalar
        if src.attr.get(constant_key):
            result = stock_cast_impl(self, src, dst_type)
            result.attr[constant_key] = True
            return result
        origin = src.attr.get(fold_key) if src_ty == tl.float32 else None
        if origin is not None and dst_ty in (tl.float16, tl.bfloat16):
            return cast_impl(self, origin, dst_type)
        if src_ty == tl.float32 and src.attr.get(fp16_key):
            toolchain.check(tl.float16, dst_ty)
        toolchain.check(src_ty, dst_ty)
        if (src_ty.is_int() or src_ty.is_bool()) and dst_ty == tl.float32:
            result = stock_cast_impl(self, src, dst_type)
            result.attr[fold_key] = src
            return result
        if src_ty == tl.float16 and dst_ty == tl.float32:
            result = stock_cast_impl(self, src, dst_type)
            result.attr[fp16_key] = True
            return result
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
            data = np.asarray(src.data)
            if src_ty.is_int():  # bool included (0/1 are exact either way)
                return interpreter.TensorHandle(int_to_bf16_bits(data), dst_ty)
            if src_ty.is_fp64():  # one rounding, not fp64->fp32->bf16
                data = float64_to_float32_round_to_odd(data)
            # fp16->fp32 is exact; fp32->bf16 rounds once (as do fp64 values taken to
            # fp32 rounding to odd first: fp32 keeps more than bf16's bits + 2)
            return interpreter.TensorHandle(
                float32_to_bf16_bits(data.astype(np.float32)), dst_ty
            )
        return stock_cast_impl(self, src, dst_type)

    builder.cast_impl = cast_impl

    def _constant(get):
        def constant(self, value):
            handle = get(self, value)
            handle.attr[constant_key] = True
            return handle

        return constant

    def _keeps_constant(create):  # (3.0-3.2 broadcast a literal before converting it)
        def keeps(self, *args):  # (3.6's create_splat takes the type first)
            handle = create(self, *args)
            handles = (a for a in args if isinstance(a, interpreter.TensorHandle))
            if any(h.attr.get(constant_key) for h in handles):
                handle.attr[constant_key] = True
            return handle

        return keeps

    for name in dir(builder):
        if re.fullmatch(r"get_(u?int\d+|fp\d+|bf16|null_value|all_ones_value)", name):
            setattr(builder, name, _constant(getattr(builder, name)))
    for name in ("create_splat", "create_broadcast", "create_expand_dims"):
        create = getattr(builder, name, None)
        if create is not None:
            setattr(builder, name, _keeps_constant(create))
    for name in ("create_si_to_fp", "create_ui_to_fp", "create_fp_to_si",
                 "create_fp_to_ui", "create_fp_ext", "create_fp_trunc"):  # fmt: skip
        # The stock class binds these as lambdas calling self.cast_impl: nothing to rebind,
        # but make sure that is still true for this Triton.
        if "cast_impl" not in getattr(builder, name).__code__.co_names:
            raise RuntimeError(
                f"triton interpreter's InterpreterBuilder.{name} no longer goes through cast_impl"
            )


# --- triton 3.6.0 runtime/interpreter.py GridExecutor._restore_args_dev: after a
# launch the interpreter writes its host copies back with `storage.copy_(host)`.
# For CPU tensors the host copy *is* the tensor's storage (UntypedStorage.cpu()
# returns self), so this is a self-copy and emulator plumbing, not a copy on the
# device.  While the write-back runs (_write_back_staged), a storage copied onto
# itself is left as it is (any other write-back copies as before), so that it
# reaches no copy_ kernel: neither the kunlunxin copy_ under cpu_dispatch() or
# flag_gems.use_gems(), where spies, launch counts and fault injection would see it,
# nor a copy_ that failed to see it as a no-op (a mutant of its self-alias check),
# which would launch a kernel inside the running launch and deadlock on LibEntry's
# lock.  (torch 2.13.0 / 2.11.x UntypedStorage.copy_.)
def _storage_self_copies_left_alone() -> None:
    import torch

    stock_storage_copy = torch.UntypedStorage.copy_

    def _storage_copy_(self, src, *args, **kwargs):
        if (
            getattr(_state, "staging", 0)
            and isinstance(src, torch.UntypedStorage)
            and self.device == src.device
            and self.data_ptr() == src.data_ptr()
            and self.nbytes() == src.nbytes()
        ):
            return self
        return stock_storage_copy(self, src, *args, **kwargs)

    torch.UntypedStorage.copy_ = _storage_copy_


# --- triton 3.0-3.6 runtime/interpreter.py GridExecutor._restore_args_dev: marks the
# write-back (``_state.staging``) for _storage_self_copies_left_alone.  On 3.0-3.2 the
# host copy of a tensor argument is `arg.cpu()`, which for a CPU tensor is the tensor
# itself (or, for a lazily negated one, the plain alias _strided_buffers_pass_through
# makes), and the write-back is `arg_dev.data.copy_(arg_hst.to(arg_dev.device).data)`:
# a Tensor.copy_ of memory onto itself, which would reach the kunlunxin copy_ under
# test.  Such pairs (the same memory, same view) are left out of the write-back, as
# 3.3+'s storage self-copies are; any other pair is written back as before.
def _write_back_staged(interpreter) -> None:
    import torch

    stock_restore = interpreter.GridExecutor._restore_args_dev

    def _same_memory(dev, hst):
        return dev is hst or (  # (a StridedBuffer passes through as itself)
            isinstance(dev, torch.Tensor)
            and isinstance(hst, torch.Tensor)
            and dev.device == hst.device
            and dev.data_ptr() == hst.data_ptr()
            and dev.size() == hst.size()
            and dev.stride() == hst.stride()
        )

    def _restore_args_dev(self, args_dev, args_hst, kwargs, kwargs_hst):
        if _triton_version() < (3, 3):
            pairs = [
                (d, h) for d, h in zip(args_dev, args_hst) if not _same_memory(d, h)
            ]
            args_dev, args_hst = [d for d, _ in pairs], [h for _, h in pairs]
            kept = [k for k in kwargs if not _same_memory(kwargs[k], kwargs_hst[k])]
            kwargs = {k: kwargs[k] for k in kept}
            kwargs_hst = {k: kwargs_hst[k] for k in kept}
        _state.staging = getattr(_state, "staging", 0) + 1
        try:
            return stock_restore(self, args_dev, args_hst, kwargs, kwargs_hst)
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
# passed through as is; the write-back then copies its storage onto itself.
def _strided_buffers_pass_through(interpreter) -> None:
    import torch

    stock_init = interpreter.GridExecutor._init_args_hst

    def _passes_through(arg):
        if isinstance(arg, torch.Tensor) or not hasattr(arg, "data_ptr"):
            return False
        storage = getattr(arg, "untyped_storage", None)
        return storage is not None and getattr(
            storage(), "device", None
        ) == torch.device("cpu")

    # A tensor with the lazy negation bit: the stock method's new_empty() clones it
    # first (resolving the negation, through copy_, which re-enters the op under test
    # and deadlocks on LibEntry's lock).  Compiled Triton reads such a tensor's memory
    # through data_ptr() and never sees the bit; the kernel gets that memory here too,
    # as a plain alias of the same storage.
    def _raw(arg):
        if isinstance(arg, torch.Tensor) and arg.is_neg():
            alias = torch.empty(0, dtype=arg.dtype, device=arg.device)
            return alias.set_(
                arg.untyped_storage(), arg.storage_offset(), arg.size(), arg.stride()
            )
        return arg

    def _init_args_hst(self, args_dev, kwargs):
        args_dev = [_raw(a) for a in args_dev]
        kwargs = {k: _raw(a) for k, a in kwargs.items()}
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


# --- triton 3.0-3.2 runtime/interpreter.py _patch_lang_tensor: a tensor's __bool__
# evaluates any one-element tensor (`bool(data) if data.size == 1 else True`), and
# 3.0-3.2's language/semantic.py store, load and atomics test a mask with `if not
# mask:`.  A one-lane block (a 1-wide tile: the kunlunxin codegen gives one to a
# 1-element tensor, over 12 programs) whose lane is masked off is then stored
# *unmasked*, out of bounds (the heap corrupts: `free(): invalid next size`), where
# compiled Triton (no such __bool__) and 3.3+ (`if mask is None:`) write nothing.
# Only scalars, which are no blocks, evaluate: what compiled Triton can branch on.
def _only_scalars_branch(interpreter) -> None:
    stock_patch_lang_tensor = interpreter._patch_lang_tensor

    def _patch_lang_tensor(tensor):
        stock_patch_lang_tensor(tensor)
        tensor.__bool__ = lambda self: (
            True if self.type.is_block() else bool(self.handle.data)
        )

    interpreter._patch_lang_tensor = _patch_lang_tensor


# --- triton 3.6.0 runtime/interpreter.py _implicit_cvt: a Python bool kernel
# argument gets Triton type int1 (mangle_type) but an int32 numpy array, which
# TensorHandle rejects ("numpy data itemsize (32 bits) exceeds dtype
# primitive_bitwidth (1 bits) for triton type int1"): a bool fill value (full,
# fill_ of a bool tensor, FlagGems 5.0.2 and main) cannot be launched.  A Python
# float argument stays a bare float, which has no `.to` (a float exponent of
# pow: "'float' object has no attribute 'to'").  Compiled Triton passes them as an
# i1 and an fp32 scalar (mangle_type: "i1", "fp32").  Hold them so, as numpy bool
# (the interpreter's own int1 storage: comparisons give np.bool_) and float32;
# every other argument as before.  3.6 only (the Triton matrix was checked
# without it).
def _bool_and_float_arguments_as_compiled(interpreter) -> None:
    import triton.language as tl

    stock_implicit_cvt = interpreter._implicit_cvt

    def _implicit_cvt(arg):
        if isinstance(arg, (bool, np.bool_)):
            data, ty = np.array([arg], dtype=np.bool_), tl.int1
        elif isinstance(arg, float):
            data, ty = np.array([arg], dtype=np.float32), tl.float32
        else:
            return stock_implicit_cvt(arg)
        return tl.tensor(interpreter.TensorHandle(data, ty), ty)

    interpreter._implicit_cvt = _implicit_cvt


def float32_to_bf16_bits(values):
    """bfloat16 bit patterns (uint16) of float32 values, rounded to nearest even.

    Overflow rounds to +-inf as in torch/hardware.  NaN becomes the canonical quiet NaN
    0x7FFF (what NVIDIA's cvt.rn.bf16.f32 gives; torch's CPU paths give 0xFFFF or 0x7FC0
    depending on vectorisation, so NaN payloads are not comparable bit for bit).
    """
    values = np.ascontiguousarray(values, dtype=np.float32)
    bits = values.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    rounded[np.isnan(values)] = 0x7FFF
    return rounded.astype(np.uint16)


def int_to_bf16_bits(values):
    """bfloat16 bit patterns (uint16) of integers, rounded ONCE to nearest even.

    Exact integer arithmetic: neither float32 (torch's int->fp32->bf16) nor float64
    (inexact above 2**53) may stand in between, since each would be a second rounding.
    Every 64-bit integer is finite in bfloat16 (max about 3.4e38), so there is no
    overflow.
    """
    values = np.asarray(values)
    if values.dtype.kind == "u" or values.dtype == np.bool_:
        negative = np.zeros(values.shape, dtype=bool)
        magnitude = values.astype(np.uint64)
    else:
        negative = values < 0
        raw = values.astype(np.int64).view(np.uint64)
        magnitude = np.where(negative, ~raw + np.uint64(1), raw)  # |-2**63| fits
    length = np.zeros(values.shape, dtype=np.uint64)  # bit length of the magnitude
    rest = magnitude.copy()
    for step in (32, 16, 8, 4, 2, 1):
        big = rest >= (np.uint64(1) << np.uint64(step))
        length += np.where(big, np.uint64(step), np.uint64(0))
        rest = np.where(big, rest >> np.uint64(step), rest)
    length += (rest > 0).astype(np.uint64)
    # keep 8 significant bits (bf16's 7 stored + the implicit one)
    shift = np.where(length > 8, length - np.uint64(8), np.uint64(0))
    kept = magnitude >> shift
    dropped = magnitude & ((np.uint64(1) << shift) - np.uint64(1))
    half = (np.uint64(1) << shift) >> np.uint64(1)
    round_up = (shift > 0) & (
        (dropped > half) | ((dropped == half) & ((kept & np.uint64(1)) == 1))
    )
    kept = kept + round_up.astype(np.uint64)  # 256 after a carry: still exact below
    exact = np.ldexp(kept.astype(np.float64), shift.astype(np.int64))
    bits = (exact.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return np.where(negative, bits | np.uint16(0x8000), bits).astype(np.uint16)


def float64_to_float32_round_to_odd(values):
    """float32 values of float64 values, rounded to odd (inexact results get an odd
    last bit).  Rounding that to a format with at most 22 significant bits then gives
    the correctly rounded result of the float64 value: one rounding, not two."""
    values = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        nearest = values.astype(np.float32)
        inexact = np.isfinite(values) & (nearest.astype(np.float64) != values)
    even = (nearest.view(np.uint32) & 1) == 0
    # the odd neighbour is one step from the nearest, toward the exact value
    toward = np.where(values > nearest.astype(np.float64), np.inf, -np.inf)
    odd = np.nextafter(nearest, toward.astype(np.float32))
    # beyond float32's range: the largest finite float32 (odd), same sign
    return np.where(inexact & even, odd, nearest).astype(np.float32)


def bf16_bits_to_float32(bits):
    """float32 values of bfloat16 bit patterns (exact: bf16 is the top half of fp32)."""
    bits = np.ascontiguousarray(bits).view(np.uint16)
    return (bits.astype(np.uint32) << 16).view(np.float32)


def no_device_index(device):
    """torch's no-device index (-1) for what names the emulated device, the CPU:
    ``None`` (a CPU tensor's ``device.index``), a ``torch.device('cpu')`` object (a
    CPU tensor's ``device``) or the string ``"cpu"``; anything else unchanged."""
    import torch

    if device is None:
        return -1
    if isinstance(device, (str, torch.device)) and torch.device(device).type == "cpu":
        return -1
    return device


def patch_torch_cpu() -> None:
    import torch

    # --- torch 2.13.0 (2.11.x) torch/cuda/__init__.py _DeviceGuard: flag_gems' generated
    # wrappers enter `torch_device_fn._DeviceGuard(in0.device.index)` (torch_device_fn is
    # torch.cuda for kunlunxin).  CPU tensors have device.index None, which
    # torch.cuda._exchange_device rejects; -1 is torch's own "no device" index, for
    # which it does nothing.  Only the CPU is mapped (no_device_index); any other
    # index behaves as before.
    stock_guard = torch.cuda._DeviceGuard
    if getattr(stock_guard, "_copyfix_patched", False):
        return

    class _DeviceGuard(stock_guard):
        _copyfix_patched = True

        def __init__(self, index):
            super().__init__(no_device_index(index))

    torch.cuda._DeviceGuard = _DeviceGuard

    # --- torch 2.13.0 (2.11.x) torch/cuda/__init__.py device: FlagGems' ops enter
    # `torch_device_fn.device(x.device)` with the tensor's device *object* (the
    # KunlunXIN and generic mm, bmm, embedding, sum, mean, max, argmax, any, full,
    # ones, fill_ ...: `with torch_device_fn.device(inp.device):`, flag_gems 5.0.2 and
    # main 2026-08-21), the generic pointwise_dynamic wrappers its index.  Stands for
    # the XPU's device guard: torch_xmlir registers the XPU as the "cuda" device type
    # (KunlunXIN's descriptor, runtime/backend/_kunlunxin/__init__.py: device_name
    # "cuda"), so on the XPU `torch.cuda.device(<xpu tensor>.device)` selects that
    # XPU.  A CPU device object (or index None) is rejected by _get_device_index
    # ("Expected a cuda device, but got: cpu"); the emulated device is the CPU, so it
    # maps to torch's no-device index -1, for which the guard does nothing.
    # How it could hide a device failure: on the XPU a *host* tensor reaching such an
    # op fails in this guard; here the host is the emulated device, so it cannot.  Only
    # the CPU is mapped (a cuda index or device object still goes to torch's own
    # check), and the device model (faults.xpu_device_model) still faults every
    # strided aten copy those ops make, so the emulation is no more lenient about the
    # copies this overlay is about.
    stock_device = torch.cuda.device

    class device(stock_device):
        _copyfix_patched = True

        def __init__(self, index):
            super().__init__(no_device_index(index))

    torch.cuda.device = device

    # --- torch 2.13.0 (2.11.x) torch/cuda/__init__.py current_device(): flag_gems'
    # LibEntry (5.0.2 and main) keys its kernel cache on torch_device_fn.current_device()
    # (torch.cuda for kunlunxin), and the kunlunxin copy_ launches its cached kernels only
    # on the current device.  Without CUDA it raises.  The emulated device is the CPU,
    # whose index torch reports as -1 (Tensor.get_device()): report that.
    torch.cuda.current_device = lambda: -1


def patch_flag_gems_cpu(base: str) -> None:
    """The flag_gems patches of the cpu emulation, for ``base`` (a key of FLAGGEMS_BASES)."""
    _provide_interpreter_driver()
    # flag_gems.utils.libentry imports flag_gems itself, so the LibEntry patch can only be
    # applied after `import flag_gems`: do that import here, with the environment and
    # the Triton/torch patches above already in place.  No kernel runs during the import.
    import flag_gems  # noqa: F401

    # (the attribute flag_gems.utils.libentry is the decorator function, not the module)
    _patch_libentry(sys.modules["flag_gems.utils.libentry"])
    _register_on_cpu(flag_gems, base)
    _to_copy_on_the_emulated_device()
    _where_on_the_emulated_device()


# The where modules whose device pick the emulation adapts (kunlunxin and generic).
WHERE_MODULES = ("_kunlunxin.ops.where", "flag_gems.ops.where")
_WHERE_DEVICE_PICK = 'filter(lambda k: k.type != "cpu", devices)'


def _where_on_the_emulated_device() -> None:
    # --- flag_gems 5.0.2 / main 2026-08-21 _kunlunxin/ops/where.py and ops/where.py
    # where_self_out: picks the device of its operands as the first whose type is
    # not "cpu" (`list(filter(lambda k: k.type != "cpu", devices))`, its only use of
    # filter), moves 0-dim CPU operands there, and asserts that one exists ("CPU
    # only. There seems a mistake to dispatch to here.").  Stands for the XPU's device
    # type: torch_xmlir's XPU tensors have type "cuda" (KunlunXIN's descriptor), so on
    # the XPU the pick finds them.  In the cpu emulation the emulated device *is* the CPU (see
    # _register_on_cpu): the module's `filter` becomes one that, where every operand is
    # on the CPU and the pick would find none, keeps them all (the emulated device);
    # any other call filters as before.  How it could hide a device failure: on the
    # XPU a non-0-dim host tensor given with device tensors fails the same-device
    # assert, and a 0-dim host one is moved; here host and device are one, so neither
    # shows.  Checked against the module's source: exactly that one filter call.
    import inspect

    import torch

    for name in WHERE_MODULES:
        module = sys.modules.get(name)
        if module is None or getattr(module, "filter", None) is _emulated_device_filter:
            continue
        source = inspect.getsource(module)
        if source.count("filter(") != 1 or _WHERE_DEVICE_PICK not in source:
            raise RuntimeError(
                f"{name} ({module.__file__}) no longer picks its device with "
                f"{_WHERE_DEVICE_PICK!r} alone; re-check the emulation's where patch"
            )
        module.filter = _emulated_device_filter
    del torch


def _emulated_device_filter(predicate, items):
    """``filter`` for the where modules: where every item is the CPU (the emulated
    device) and ``predicate`` keeps none, all of them; else the builtin's result."""
    import builtins

    import torch

    items = list(items)
    kept = list(builtins.filter(predicate, items))
    cpu = torch.device("cpu")
    if (
        not kept
        and items
        and all(isinstance(d, torch.device) and d == cpu for d in items)
    ):
        return iter(items)
    return iter(kept)


# The _to_copy modules whose host check the emulation adapts (this overlay's files).
TO_COPY_MODULES = ("flag_gems.ops.to", "_kunlunxin.ops.to")


def _to_copy_on_the_emulated_device() -> None:
    # --- this overlay's flag_gems/ops/to.py and _kunlunxin/ops/to.py (written over
    # flag_gems 5.0.2 and main 2026-08-21): `_is_host_or_transfer(x, device)` sends host
    # tensors (device type "cpu") and copies between devices to aten, as upstream's
    # to.py does inline.  In the cpu emulation the emulated device *is* the CPU (see
    # _register_on_cpu), so there only a copy to another device is a transfer: without
    # this, `.to()` on the emulated device would never reach a Triton kernel.  Pre-images
    # (upstream's inline check) have no such helper and are left as they are.
    for name in TO_COPY_MODULES:
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "_is_host_or_transfer"):
            module._is_host_or_transfer = _is_transfer


def _is_transfer(x, device) -> bool:
    return device != x.device


def _provide_interpreter_driver() -> None:
    # --- triton 3.6.0 runtime/driver.py: under the interpreter on a CPU box no backend
    # driver is active ("0 active drivers").  Two readers need one:
    # - FlagGems main 2026-08-21 utils/libentry.py LibTuner.__init__ resolves a
    #   benchmarker at import time (flagtune/runtime/_benchmark_protocol.py
    #   resolve_benchmarker calls driver.active.get_benchmarker());
    # - PR 3's launch cache reads the current device and stream at every launch, as
    #   compiled Triton's launch does (driver.active.get_current_device(),
    #   .get_current_stream(device)).
    # Set a stand-in through the public DriverConfig.set_active: the emulated device is
    # the CPU, index -1 as torch reports it (patch_torch_cpu), stream 0 (the CPU has
    # one), and its benchmarker is interpreter_benchmark (below).
    #
    # --- triton 3.6.0 testing.do_bench (what Triton's Autotuner times configs with
    # when given warmup/rep, as FlagGems 5.0.2's LibTuner does: generic mm, bmm,
    # any_dim; main 2026-08-21's generic linear, which its kunlunxin backend uses)
    # reads driver.active.get_device_interface() for events to time on.  Stands for
    # the device's timing of every candidate config (on the XPU: its autotuner's
    # benchmark runs).  The interpreter has no clock worth reading, so the stand-in
    # runs each candidate ONCE (a config that fails raises here as on the device) and
    # reports the same time for all: the autotuner then keeps its first config, for
    # every shape.  How it could hide a device failure: the device keeps the fastest
    # config, whose results alone reach the model; a config that computes a wrong
    # result without failing is seen here only if it is the first.  Both
    # triton.testing.do_bench and the driver's benchmarker are the stand-in (the cpu emulation
    # without a GPU driver only).
    from triton.runtime.driver import driver

    class InterpreterDriver:
        def get_current_device(self):
            return -1

        def get_current_stream(self, device=None):
            return 0

        def get_benchmarker(self):
            return interpreter_benchmark

    try:  # (a GPU box has a real driver: keep it; before 3.4 driver.active is a
        # lazy proxy that raises only when an attribute is read)
        driver.active.get_current_device  # noqa: B018
    except RuntimeError:
        import triton.testing

        driver.set_active(InterpreterDriver())
        triton.testing.do_bench = interpreter_benchmark


def interpreter_benchmark(kernel_call, *args, quantiles=None, **kwargs):
    """The cpu emulation's benchmark: ``kernel_call()`` once, and the same time for
    every call (0.0, or one per quantile), so that an autotuner keeps its first
    config (see _provide_interpreter_driver)."""
    kernel_call()
    return [0.0 for _ in quantiles] if quantiles else 0.0


def _register_on_cpu(flag_gems, base: str) -> None:
    # --- flag_gems 5.0.2 runtime/backend/device.py / main 2026-08-21
    # runtime/backend/device_finder.py DeviceDetector (a singleton) holds `dispatch_key`
    # ("CUDA" for kunlunxin, from device_name "cuda"), which the op registrar (5.0.2
    # runtime/register.py Register, main runtime/op_registrar.py) uses as the
    # torch.library key for enable()/use_gems(); flag_gems/__init__.py copies
    # device_name into `flag_gems.device`.  In the cpu emulation the emulated device *is* the CPU:
    # registering under "CPU" makes `flag_gems.use_gems(include=[...])` reach CPU
    # tensors, and `flag_gems.device` tells tests where to put them.  Only what a test
    # asks use_gems for is registered.
    if base == "5.0.2":
        from flag_gems.runtime.backend.device import DeviceDetector
    else:
        from flag_gems.runtime.backend.device_finder import DeviceDetector

    DeviceDetector().dispatch_key = "CPU"
    flag_gems.device = "cpu"
    # --- flag_gems main 2026-08-21 ops/mul.py: `_DEVICE_NAME = runtime_device.name`
    # ("cuda") at import; mul_broadcast_func sends operands whose device type is not
    # that name to aten (`torch.ops.aten.mul.Tensor.redispatch(...)`, the host path,
    # which fails for a Python-scalar operand).  The same mapping as above: the
    # emulated device is the CPU, so a module's device-name constant becomes "cpu"
    # (only a module-level `_DEVICE_NAME` equal to the detector's device name).  How it
    # could hide a device failure: none beyond the above (host tensors are device
    # tensors here); the host path itself is not exercised in the cpu emulation.
    name = DeviceDetector().name
    for module_name, module in list(sys.modules.items()):
        if (
            module_name.startswith(("flag_gems.", "_kunlunxin."))
            and getattr(module, "_DEVICE_NAME", None) == name
        ):
            module._DEVICE_NAME = "cpu"


def _patch_libentry(libentry_module) -> None:
    # --- flag_gems 5.0.2 / main 2026-08-21 utils/libentry.py LibEntry: __init__ sizes its
    # per-device kernel cache by torch_device_fn.device_count() (module-level
    # DEVICE_COUNT), which is 0 without CUDA, and run() indexes it with
    # torch_device_fn.current_device() (-1 here, see patch_torch_cpu).  Give an
    # instance with no device slots one slot, which index -1 reaches; run() is
    # otherwise LibEntry's own, cache and launch included (the interpreter hands it an
    # InterpretedKernel where Triton hands it a CompiledKernel).
    LibEntry = libentry_module.LibEntry
    if getattr(LibEntry.run, "_copyfix_patched", False):
        return
    stock_run = LibEntry.run

    def run(self, *args, **kwargs):
        if not self.kernel_cache:
            self.kernel_cache = (dict(),)
        return stock_run(self, *args, **kwargs)

    run._copyfix_patched = True
    run.__wrapped__ = stock_run
    LibEntry.run = run


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
    """Route ``aten::copy_`` on CPU tensors to the kunlunxin ``copy_`` (the cpu emulation).

    FlagGems' ``use_gems()`` registers its ops for the device's dispatch key, which CPU
    tensors never reach.  In the cpu emulation this registers, for the CPU key only and only
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

    In the cuda emulation and on a real XPU (native) this is ``flag_gems.use_gems()`` (and ``module``, if given,
    must be :func:`copy_module`).
    """
    import torch

    mode = require()
    if mode != "cpu":
        import flag_gems

        if module is not None and module is not copy_module():
            raise ValueError(
                f"in {mode!r} mode copy_ is dispatched by flag_gems.use_gems() to {KUNLUNXIN_COPY_MODULE}; "
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
        if not isinstance(src, torch.Tensor):  # a CPU-internal wrapped number
            return native.redispatch_boxed(
                native_keyset, dst, _wrapped_number_tensor(src), non_blocking
            )
        return target.copy_(dst, src, non_blocking)

    with aten_copy_kernel(copy_, "CPU"):
        yield


# torch 2.13.0 (2.11.x): torch.library.Library("aten", "IMPL").impl(name, fn, key)
# registers a Python kernel for one dispatch key, over the ones before it; destroying
# the library object removes it.  torch warns that it overrides the kernel already
# there (the built-in CPU one, or use_gems' own): expected here.
@contextlib.contextmanager
def aten_copy_kernel(copy_, key: str) -> Iterator[None]:
    """``copy_`` as aten::copy_'s kernel for dispatch ``key`` while the block runs."""
    import torch

    lib = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*[Oo]verrid.*")
            lib.impl("copy_", copy_, key)
        yield
    finally:
        lib._destroy()
