"""The cpu emulation: FlagGems on Triton's interpreter, on CPU tensors.  Each patch
below names the internal it replaces and the versions it was checked on."""

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

from . import state, toolchain
from .kunlunxin import KUNLUNXIN_COPY_MODULE, _check_copy_module, copy_module
from .shims import strip_xpu_launch_options
from .state import patch, require

_state = threading.local()  # .staging > 0 while the interpreter writes results back
# The interpreter patches triton.language module-wide while a grid runs: the emulated
# device runs one grid at a time, as a device runs one stream's kernels in order.
_GRID_LOCK = threading.RLock()


@functools.cache
def _triton_version() -> tuple[int, int]:
    import triton

    major, minor = triton.__version__.split(".")[:2]
    return int(major), int(minor)


def constexprs_in_launch() -> bool:
    """Whether this Triton's launcher takes the constexpr parameters too (3.3+)."""
    return _triton_version() >= (3, 3)


def hook_holder():
    """What holds this Triton's launch hooks: CompiledKernel up to 3.3, knobs.runtime after."""
    if _triton_version() >= (3, 4):
        from triton import knobs

        return knobs.runtime
    from triton.compiler.compiler import CompiledKernel

    return CompiledKernel


# --- triton 3.0-3.6 JITFunction.run returns the CompiledKernel that LibEntry and PR 3's
# launch cache launch later; the interpreter returns None.  This stand-in is as strict
# as the compiled launcher: argument count, its own handles, its baked constexprs.
class InterpretedKernel:
    packed_metadata = ("copyfix-interpreted",)

    def __init__(self, jit_fn, constexprs):
        self.jit_fn = self.function = jit_fn
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
            if name in given and not (
                type(given[name]) is type(baked) and given[name] == baked
            ):
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
            holder = hook_holder()
            meta = self.launch_metadata(grid, None, *args)
            self.run(grid[0], grid[1], grid[2], None, self.function,
                     self.packed_metadata, meta, holder.launch_enter_hook,
                     holder.launch_exit_hook, *args)  # fmt: skip

        return runner


@contextlib.contextmanager
def _in_grid() -> Iterator[None]:
    grids = getattr(_state, "grids", 0)
    if not grids:  # the modules this launch patched (_patch_lang_of_device_functions)
        _state.patched_langs = set()
    _state.grids = grids + 1
    try:
        yield
    finally:
        _state.grids -= 1
        if not _state.grids:
            _state.patched_langs = set()


def import_triton_uninterpreted() -> None:
    """Import Triton with TRITON_INTERPRET unset (an xdist worker inherits it): else
    Triton's own @jit functions become stock InterpretedFunctions."""
    if "triton" not in sys.modules:
        os.environ.pop("TRITON_INTERPRET", None)
        import triton  # noqa: F401


def setup_cpu_environment(vendor: str = "kunlunxin") -> None:
    os.environ["GEMS_VENDOR"] = vendor
    # triton 3.6 reads TRITON_INTERPRET at each triton.jit decoration
    os.environ["TRITON_INTERPRET"] = "1"
    # flag_gems' LibCache names its sqlite file after the CUDA device: a private one
    if "FLAGGEMS_CACHE_DIR" not in os.environ:
        os.environ["FLAGGEMS_CACHE_DIR"] = tempfile.mkdtemp(prefix="copyfix-flaggems-")
    if "FLAGGEMS_DB_URL" not in os.environ:
        db = Path(os.environ["FLAGGEMS_CACHE_DIR"])
        db.mkdir(parents=True, exist_ok=True)
        os.environ["FLAGGEMS_DB_URL"] = (
            f"sqlite:///{db}/copyfix_emulation_tuned_configs.db"
        )


def patch_triton_interpreter(vendor: str = "kunlunxin") -> None:
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


# --- triton 3.6 jit() under TRITON_INTERPRET=1 returns no JITFunction, which flag_gems
# asserts: this subclass is one, and runs on the stock InterpretedFunction.
def _jit_function_on_the_interpreter(interpreter, stock, strips_xpu_options) -> None:
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    class InterpretedJITFunction(JITFunction):
        def __init__(self, fn, **options):
            super().__init__(fn, **options)
            self.interpreted = stock(fn, **options)
            # 3.6's interpreter runs the pre-run hooks; before 3.6 this object does
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
            for p in (p for p in self.params if p.is_constexpr):
                if p.num < len(args):
                    baked[p.name] = args[p.num]
                elif p.name in kwargs:
                    baked[p.name] = kwargs[p.name]
                elif p.default is not inspect.Parameter.empty:
                    baked[p.name] = p.default
            return baked

        def __call__(self, *args, **kwargs):  # device-function call inside a kernel
            # compiled Triton makes dtype arguments constexprs (limits.py: `dtype.value`)
            c = lambda a: tl.constexpr(a) if isinstance(a, tl.dtype) else a
            kwargs = {k: c(a) for k, a in kwargs.items()}
            return self.interpreted(*map(c, args), **kwargs)

        def rewrite(self):  # (3.2+: the interpreter rewrites the function's AST)
            return self.interpreted.rewrite()

        def __repr__(self):
            return f"InterpretedJITFunction({self.module}:{self.fn.__qualname__})"

    interpreter.InterpretedFunction = InterpretedJITFunction


# --- triton 3.6 JITFunction.__call__ raises outside a kernel.  Triton's own library
# functions (tl.cdiv, ...) are plain JITFunctions here: inside an interpreted launch
# only, a call runs on the stock interpreter (compiled Triton inlines it).
def _library_jit_calls_inside_a_launch(stock) -> None:
    from triton.runtime.jit import JITFunction

    @patch(JITFunction, "__call__")
    def _(stock_jit_call):
        def jit_call(self, *args, **kwargs):
            if not getattr(_state, "grids", 0):
                return stock_jit_call(self, *args, **kwargs)
            if "_copyfix_interpreted" not in self.__dict__:
                self._copyfix_interpreted = stock(self.fn)
            return self._copyfix_interpreted(*args, **kwargs)

        return jit_call


# --- triton 3.0-3.6 _patch_lang(fn) asserts triton.language is among fn's globals; a
# device function of a module without it (kunlunxin copy.py) gets an empty scope.
# ``skips_repatching`` (nvidia, 3.6): no repatching at each device call in a launch.
def _patch_lang_of_device_functions(interpreter, skips_repatching: bool) -> None:
    import triton.language as tl

    stock_patch_lang = interpreter._patch_lang

    def _patch_lang(fn):
        if not any(
            value is tl or value is tl.core for value in fn.__globals__.values()
        ):
            # (3.6 returns the scope it patched in; before 3.6 nothing)
            scope = getattr(interpreter, "_LangPatchScope", None)
            return scope() if scope is not None else None
        # 3.0-3.2 test `value in [tl, tl.core]` on every global, and torch dtypes'
        # __eq__ raises on a module: show the stock function the modules only
        modules = {k: v for k, v in fn.__globals__.items() if inspect.ismodule(v)}
        if skips_repatching and getattr(_state, "grids", 0):
            langs = {id(v) for v in modules.values() if v is tl or v is tl.core}
            if langs <= _state.patched_langs:
                return interpreter._LangPatchScope()
            _state.patched_langs |= langs
        return stock_patch_lang(types.SimpleNamespace(__globals__=modules))

    interpreter._patch_lang = _patch_lang


# --- triton 3.6 InterpreterBuilder.cast_impl gets bf16 wrong (raw-bit astype).
# Compiled Triton (pinned by tests/tooling/test_conversions.py) rounds into bf16 once,
# to nearest even, and folds int -> fp32 -> 16-bit float into one conversion (an
# integer's fp32 handle remembers its source).  The toolchain model checks conversions
# as emitted (fp16 widened to fp32 counts as fp16); constants are marked, not checked.
def _casts_as_compiled_triton(interpreter) -> None:
    import triton.language as tl

    builder = interpreter.InterpreterBuilder
    stock_cast_impl = builder.cast_impl
    fold_key, fp16_key = "copyfix_int_to_fp32_origin", "copyfix_fp16_origin"
    constant_key = "copyfix_constant"

    def marked_cast(self, src, dst_type, key, value):
        result = stock_cast_impl(self, src, dst_type)
        result.attr[key] = value
        return result

    def cast_impl(self, src, dst_type):
        src_ty, dst_ty = src.dtype.scalar, dst_type.scalar
        if src.attr.get(constant_key):
            return marked_cast(self, src, dst_type, constant_key, True)
        origin = src.attr.get(fold_key) if src_ty == tl.float32 else None
        if origin is not None and dst_ty in (tl.float16, tl.bfloat16):
            return cast_impl(self, origin, dst_type)
        if src_ty == tl.float32 and src.attr.get(fp16_key):
            toolchain.check(tl.float16, dst_ty)
        toolchain.check(src_ty, dst_ty)
        if (src_ty.is_int() or src_ty.is_bool()) and dst_ty == tl.float32:
            return marked_cast(self, src, dst_type, fold_key, src)
        if src_ty == tl.float16 and dst_ty == tl.float32:
            return marked_cast(self, src, dst_type, fp16_key, True)
        if src_ty == tl.bfloat16 and dst_ty != tl.bfloat16:
            value = bf16_bits_to_float32(src.data)
            if dst_ty != tl.float32:  # (triton's semantic goes through fp32)
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
        if "cast_impl" not in getattr(builder, name).__code__.co_names:
            raise RuntimeError(
                f"triton interpreter's InterpreterBuilder.{name} no longer goes through cast_impl"
            )


# --- triton 3.3-3.6 GridExecutor._restore_args_dev's `storage.copy_(host)` is a
# self-copy for a CPU tensor: left alone during the write-back, so no copy_ sees it.
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


# --- triton 3.0-3.6 GridExecutor._restore_args_dev: marks the write-back; 3.0-3.2's
# Tensor.copy_ of memory onto itself (it would reach the copy_ under test) is left out.
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


# --- triton 3.6 GridExecutor._init_args_hst needs Tensor methods flag_gems'
# StridedBuffer lacks; a CPU-resident one needs no host copy: passed through.
def _strided_buffers_pass_through(interpreter) -> None:
    import torch

    stock_init = interpreter.GridExecutor._init_args_hst

    def _passes_through(arg):
        if isinstance(arg, torch.Tensor) or not hasattr(arg, "data_ptr"):
            return False
        storage = getattr(arg, "untyped_storage", lambda: None)()
        return getattr(storage, "device", None) == torch.device("cpu")

    # a lazily negated tensor would be cloned through copy_: alias its raw memory
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


# --- triton 3.0-3.2 _patch_lang_tensor: `if not mask:` in store/load evaluates a
# one-lane block and stores it unmasked, out of bounds: only scalars evaluate (3.3+).
def _only_scalars_branch(interpreter) -> None:
    stock_patch_lang_tensor = interpreter._patch_lang_tensor

    def _patch_lang_tensor(tensor):
        stock_patch_lang_tensor(tensor)
        tensor.__bool__ = lambda self: (
            True if self.type.is_block() else bool(self.handle.data)
        )

    interpreter._patch_lang_tensor = _patch_lang_tensor


# --- triton 3.6 _implicit_cvt: a Python bool gets int1 with int32 data (rejected), a
# float stays bare (no `.to`); compiled Triton passes an i1 and an fp32 scalar.
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
    """bf16 bits of float32 values, to nearest even; NaN to 0x7FFF (cvt.rn.bf16.f32)."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    bits = values.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    rounded[np.isnan(values)] = 0x7FFF
    return rounded.astype(np.uint16)


def int_to_bf16_bits(values):
    """bf16 bits of integers, rounded ONCE to nearest even: rounded to odd at <= 53
    bits (float64, exact), then at 24 (float32), the last rounding is the right one."""
    values = np.asarray(values)
    negative = values < 0 if values.dtype.kind == "i" else np.zeros(values.shape, bool)
    magnitude = values.astype(np.uint64)
    magnitude = np.where(negative, ~magnitude + np.uint64(1), magnitude)  # |-2**63|
    shift = np.maximum(np.frexp(magnitude.astype(np.float64))[1] - 53, 0)
    cut = shift.astype(np.uint64)
    sticky = (magnitude & ((np.uint64(1) << cut) - np.uint64(1))) != 0
    odd = np.ldexp(((magnitude >> cut) | sticky).astype(np.float64), shift)
    odd = float64_to_float32_round_to_odd(np.where(negative, -odd, odd))
    return float32_to_bf16_bits(odd)


def float64_to_float32_round_to_odd(values):
    """float32 of float64 values rounded to odd, so that a further rounding to at most
    22 significant bits is the correct single rounding of the float64 value."""
    values = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        nearest = values.astype(np.float32)
        inexact = np.isfinite(values) & (nearest.astype(np.float64) != values)
    even = (nearest.view(np.uint32) & 1) == 0
    # the odd neighbour is one step from the nearest, toward the exact value
    toward = np.where(values > nearest.astype(np.float64), np.inf, -np.inf)
    odd = np.nextafter(nearest, toward.astype(np.float32))
    return np.where(inexact & even, odd, nearest).astype(np.float32)


def bf16_bits_to_float32(bits):
    bits = np.ascontiguousarray(bits).view(np.uint16)
    return (bits.astype(np.uint32) << 16).view(np.float32)


def no_device_index(device):
    """-1 for what names the CPU (None, a cpu device, "cpu"); anything else unchanged."""
    import torch

    cpu = isinstance(device, (str, torch.device)) and torch.device(device).type == "cpu"
    return -1 if device is None or cpu else device


def patch_torch_cpu() -> None:
    import torch

    # --- torch 2.13 / 2.11 torch.cuda._DeviceGuard and device (the XPU's guard): the
    # CPU maps to -1 (a no-op guard); any other index still meets torch's check
    for name in ("_DeviceGuard", "device"):
        stock = getattr(torch.cuda, name)
        if not getattr(stock, "_copyfix_patched", False):

            def __init__(self, index, _stock=stock):
                _stock.__init__(self, no_device_index(index))

            patched = {"_copyfix_patched": True, "__init__": __init__}
            setattr(torch.cuda, name, type(name, (stock,), patched))
    # LibEntry keys its kernel cache on current_device(), which raises without CUDA
    torch.cuda.current_device = lambda: -1


def patch_flag_gems_cpu(base: str) -> None:
    _provide_interpreter_driver()
    # (LibEntry's module imports flag_gems itself: patched after the import)
    import flag_gems  # noqa: F401

    _patch_libentry(sys.modules["flag_gems.utils.libentry"])
    _register_on_cpu(flag_gems, base)
    _to_copy_on_the_emulated_device()
    _where_on_the_emulated_device()


WHERE_MODULES = ("_kunlunxin.ops.where", "flag_gems.ops.where")
_WHERE_DEVICE_PICK = 'filter(lambda k: k.type != "cpu", devices)'


def _where_on_the_emulated_device() -> None:
    # --- flag_gems 5.0.2 / main ops/where.py asserts an operand device whose type is
    # not "cpu": where every operand is on the CPU, all are kept
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


def _emulated_device_filter(predicate, items):
    """``filter``, but all items where every one is the CPU and ``predicate`` keeps none."""
    import torch

    items = list(items)
    kept = list(filter(predicate, items))
    cpu = lambda d: isinstance(d, torch.device) and d == torch.device("cpu")
    return iter(items if not kept and items and all(map(cpu, items)) else kept)


TO_COPY_MODULES = ("flag_gems.ops.to", "_kunlunxin.ops.to")


def _to_copy_on_the_emulated_device() -> None:
    # --- this overlay's ops/to.py `_is_host_or_transfer(x, device)` sends host tensors
    # to aten; on the emulated device (the CPU) only a copy to another device is one

    for name in TO_COPY_MODULES:
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "_is_host_or_transfer"):
            module._is_host_or_transfer = _is_transfer


def _is_transfer(x, device) -> bool:
    return device != x.device


def _provide_interpreter_driver() -> None:
    # --- triton 3.6 runtime/driver.py: no driver on a CPU box, which FlagGems main's
    # LibTuner and PR 3's launch cache read: one for the CPU (device -1, stream 0)
    from triton.runtime.driver import driver

    class InterpreterDriver:
        def get_current_device(self):
            return -1

        def get_current_stream(self, device=None):
            return 0

        def get_benchmarker(self):
            return interpreter_benchmark

    try:  # (a GPU box keeps its driver; before 3.4 driver.active raises lazily)
        driver.active.get_current_device  # noqa: B018
    except RuntimeError:
        import triton.testing

        driver.set_active(InterpreterDriver())
        triton.testing.do_bench = interpreter_benchmark


def interpreter_benchmark(kernel_call, *args, quantiles=None, **kwargs):
    """``kernel_call()`` once, timed 0.0: an autotuner keeps its first config."""
    kernel_call()
    return [0.0 for _ in quantiles] if quantiles else 0.0


def _register_on_cpu(flag_gems, base: str) -> None:
    # --- flag_gems DeviceDetector.dispatch_key (use_gems()'s key), flag_gems.device
    # and module-level `_DEVICE_NAME`s (main's ops/mul.py) become the CPU's.
    if base == "5.0.2":
        from flag_gems.runtime.backend.device import DeviceDetector
    else:
        from flag_gems.runtime.backend.device_finder import DeviceDetector

    DeviceDetector().dispatch_key = "CPU"
    flag_gems.device = "cpu"
    name = DeviceDetector().name
    for module_name, module in list(sys.modules.items()):
        if (
            module_name.startswith(("flag_gems.", "_kunlunxin."))
            and getattr(module, "_DEVICE_NAME", None) == name
        ):
            module._DEVICE_NAME = "cpu"


def _patch_libentry(libentry_module) -> None:
    # --- flag_gems 5.0.2 / main utils/libentry.py LibEntry sizes its kernel cache by
    # device_count() (0 without CUDA): give an instance with no slots one
    @patch(libentry_module.LibEntry, "run")
    def _(stock_run):
        def run(self, *args, **kwargs):
            if not self.kernel_cache:
                self.kernel_cache = (dict(),)
            return stock_run(self, *args, **kwargs)

        return run


@contextlib.contextmanager
def cpu_dispatch(module: types.ModuleType | None = None) -> Iterator[None]:
    """Route ``aten::copy_`` on CPU tensors to ``module.copy_`` (default
    :func:`copy_module`, looked up at each call) while open: the cpu emulation's
    ``use_gems()`` for copy_; a Python number as ``src`` goes straight to aten.  In
    other modes ``flag_gems.use_gems()`` (``module`` must be :func:`copy_module`)."""
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
    # the operator's C++ handle, found afresh: neither a test's mock of
    # OpOverload.redispatch nor xpu_fallback_failure() sees these calls
    native = torch._C._dispatch_find_schema_or_throw("aten::copy_", "")

    def copy_(dst, src, non_blocking=False):
        if not isinstance(src, torch.Tensor):  # a CPU-internal wrapped number:
            src = torch.from_numpy(np.asarray(src))  # bool, int64, float64, complex128
            return native.redispatch_boxed(native_keyset, dst, src, non_blocking)
        return target.copy_(dst, src, non_blocking)

    with aten_copy_kernel(copy_, "CPU"):
        yield


@contextlib.contextmanager
def aten_copy_kernel(copy_, key: str) -> Iterator[None]:
    """``copy_`` as aten::copy_'s kernel for dispatch ``key`` while the block runs."""
    import torch

    lib = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*[Oo]verrid.*")
            state.register_kernel(lib, "copy_", copy_, key)  # (over use_gems' own)
        yield
    finally:
        lib._destroy()
