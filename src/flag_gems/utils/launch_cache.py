# Copyright 2026 FlagOS Contributors
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""Per-signature launch cache for ``pointwise_dynamic`` (issue #4812).

A pointwise call spends most of its host time deriving things that only depend on
the call's signature: type promotion, the output layout, tile sizes and grid, and
LibEntry's kernel key.  The first call of a signature runs the usual path and
records its single kernel launch; later calls of the same signature allocate the
outputs and launch the recorded compiled kernel with their own pointers and scalar
values.

The key holds everything that launch depends on: for each tensor its dtype, shape,
strides, device and 16-byte pointer alignment; for each Python scalar its type (and,
for ints, the classes Triton specializes on: == 1, divisible by 16, i32/i64/u64);
which outputs are given; plus a caller's salt (``pointwise_dynamic`` adds the default
dtype and its block-pointer setting).  The current device, current stream and launch
hooks are read at every launch.  Calls that cannot be keyed (tensor subclasses,
StridedBuffer, sparse or named tensors, other scalar types), that launch more than
one kernel, or whose launch was not recorded as described stay on the uncached path
(a call that launches nothing, a zero-size one, is cached as its allocations).
"""

import functools
import inspect
import os
import re
import threading
import weakref
from typing import Callable

import torch
import triton
from triton import knobs
from triton.runtime.driver import driver
from triton.runtime.jit import JITFunction

from flag_gems.utils.libentry import LibEntry
from flag_gems.utils.tensor_wrapper import StridedBuffer

# Plans kept per cache (one cache per pointwise function and per instantiated
# wrapper): the oldest plan is dropped when a new signature would exceed it.
MAX_PLANS = 256

# Triton 3.3 to 3.6 launch a CompiledKernel as
# run(gx, gy, gz, stream, function, packed_metadata, launch_metadata,
#     enter_hook, exit_hook, *every_param_in_signature_order), constexprs included:
# the convention LibEntry follows for these versions.  Others keep the uncached path.
_TRITON = re.match(r"(\d+)\.(\d+)", triton.__version__)
_ABI_KNOWN = bool(_TRITON) and (3, 3) <= tuple(map(int, _TRITON.groups())) <= (3, 6)
_TENSOR, _PARAMETER = torch.Tensor, torch.nn.Parameter
_PLAIN_TENSORS = (_TENSOR, _PARAMETER)
_UNCACHEABLE = object()
_HOOK_CHAIN = getattr(knobs, "HookChain", None)
_HAS_NAMES = hasattr(torch.Tensor, "has_names")
_CACHES = weakref.WeakSet()
# on, and the launcher's convention known (read at every call: one global)
_ACTIVE = os.environ.get("FLAGGEMS_LAUNCH_CACHE", "1") != "0" and _ABI_KNOWN


def set_enabled(enabled: bool) -> None:
    """Turn the cache on or off (env FLAGGEMS_LAUNCH_CACHE=0 starts it off)."""
    global _ACTIVE
    _ACTIVE = bool(enabled) and _ABI_KNOWN


def is_enabled() -> bool:
    return _ACTIVE


class _Recording(threading.local):
    launches = None  # a list while this thread records a call's launches


_recording = _Recording()


def recorded_launch(kernel, grid):
    """``kernel[grid]``, which also records the launch while a call is recorded.

    The generated wrappers launch through this.  A recorded launch also fetches the
    compiled kernel, under the same current device and with the same arguments."""
    launches = _recording.launches
    if launches is None:
        return kernel[grid]

    def launch(*args, **kwargs):
        kernel[grid](*args, **kwargs)
        launches.append(_record_launch(kernel, grid, args, kwargs))

    return launch


def _record_launch(kernel, grid, args, kwargs):
    fn = kernel.fn if type(kernel) is LibEntry else kernel
    if not isinstance(fn, JITFunction) or getattr(fn, "pre_run_hooks", None):
        return None  # autotuned/heuristic kernels, or hooks a warmup would run again
    if not (isinstance(grid, tuple) and all(type(g) is int for g in grid)):
        return None
    compiled = fn.warmup(*args, grid=grid, **kwargs)  # the JIT's cached kernel
    if not all(hasattr(compiled, a) for a in ("run", "function", "packed_metadata")):
        return None
    values = []  # every parameter in signature order, as the launcher takes them
    for p in fn.params:
        if p.num < len(args):
            values.append(args[p.num])
        elif p.name in kwargs:
            values.append(kwargs[p.name])
        elif p.default is not inspect.Parameter.empty:
            values.append(p.default)
        else:
            return None
    grid = tuple(grid) + (1,) * (3 - len(grid))
    device = driver.active.get_current_device()
    return compiled, grid, values, device


def _int_class(v: int):
    if -(2**31) <= v < 2**31:
        return "i32"
    return "u64" if 2**63 <= v < 2**64 else "i64"


def _describe(arg):
    """The part of one argument a launch depends on; raises TypeError if unknown."""
    t = type(arg)
    if t is _TENSOR or t is _PARAMETER:
        # stride() raises for sparse and other non-strided layouts; named tensors
        # (torch < 2.13) stay uncached: the uncached path's empty_like keeps names
        if _HAS_NAMES and arg.has_names():
            raise TypeError("named tensor")
        aligned = arg.data_ptr() % 16 == 0
        return arg.dtype, arg.shape, arg.stride(), arg.get_device(), aligned
    if t is float or t is bool or arg is None:
        return t
    if t is int:
        return int, arg == 1, arg % 16 == 0, _int_class(arg)
    raise TypeError(t)


def _key(args, kwargs, salt):
    try:
        if kwargs:
            named = tuple(map(_describe, kwargs.values()))
            return salt, tuple(map(_describe, args)), tuple(kwargs), named
        return salt, tuple(map(_describe, args))
    except (TypeError, RuntimeError, NotImplementedError):
        return None


class _Plan:
    """What one signature's call does: allocate these outputs, launch this kernel.

    Everything here is fixed by the key; what is not (the current device, its
    stream, the launch hooks, pointers and scalar values) is read at each run."""

    __slots__ = (
        "single", "outs", "alloc", "given", "kernel", "launcher", "handles", "grid",
        "tail", "device",
    )  # fmt: skip

    def __init__(self, single, outs, launch):
        self.single, self.outs, self.kernel = single, tuple(outs), None
        # the common cases: one output, which the call allocates or is given
        one = len(outs) == 1
        self.alloc = outs[0][1] if one else None
        self.given = outs[0][0] if one and self.alloc is None else None
        if launch is not None:
            self.kernel, self.grid, values, self.device, n_operands = launch
            self.launcher = self.kernel.run  # the compiled kernel's launcher
            self.handles = (self.kernel.function, self.kernel.packed_metadata)
            self.tail = tuple(values[n_operands:])

    def run(self, args, kwargs):
        if self.alloc is not None:
            shape, stride, dtype, device = self.alloc
            out = torch.empty_strided(shape, stride, dtype=dtype, device=device)
            if out.data_ptr() % 16:
                return _UNCACHEABLE  # not the alignment the kernel was compiled for
            outs = (out,)
        elif self.given is not None:
            outs = (kwargs[self.given],)
        else:
            outs = []
            for name, alloc in self.outs:
                if alloc is None:
                    outs.append(kwargs[name])
                    continue
                shape, stride, dtype, device = alloc
                out = torch.empty_strided(shape, stride, dtype=dtype, device=device)
                if out.data_ptr() % 16:
                    return _UNCACHEABLE
                outs.append(out)
        if self.kernel is not None:
            active = driver.active
            device = active.get_current_device()
            if device != self.device:
                return _UNCACHEABLE  # the uncached path enters the device guard
            stream = active.get_current_stream(device)
            values = (*args, *outs, *self.tail)
            runtime = knobs.runtime
            enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
            chain = _HOOK_CHAIN
            if (enter is None or (type(enter) is chain and not enter.calls)) and (
                leave is None or (type(leave) is chain and not leave.calls)
            ):  # no hook (3.3-3.5), or empty hook chains (3.6): nothing to call
                meta = enter = leave = None
            else:
                meta = self.kernel.launch_metadata(self.grid, stream, *values)
            gx, gy, gz = self.grid
            function, metadata = self.handles
            self.launcher(
                gx, gy, gz, stream, function, metadata, meta, enter, leave, *values
            )
        return outs[0] if self.single else tuple(outs)


def _operand(value, arg) -> bool:
    """Whether the launch received ``arg`` itself (a tensor may be re-wrapped)."""
    if value is arg:
        return True
    if isinstance(value, StridedBuffer) and type(arg) in _PLAIN_TENSORS:
        base = value.unwrap()
        return (
            base is arg
            and value.data_ptr() == arg.data_ptr()
            and value.dtype == arg.dtype
        )
    return False


def _fresh(out, operands) -> bool:
    """Whether ``out`` was allocated by the call: not a view, not an operand's memory."""
    if type(out) not in _PLAIN_TENSORS or out._base is not None:
        return False
    if out.storage_offset() != 0 or out.data_ptr() % 16:
        return False
    storage = out.untyped_storage()
    if storage.nbytes() == 0:
        return True
    return all(
        type(a) not in _PLAIN_TENSORS
        or a.untyped_storage().data_ptr() != storage.data_ptr()
        for a in operands
    )


def _plan(args, kwargs, result, launches):
    if len(launches) > 1 or None in launches:
        return None
    single = not isinstance(result, tuple)
    results = (result,) if single else result
    outs = []
    for i, out in enumerate(results):
        name = f"out{i}"
        if name in kwargs and kwargs[name] is out:
            outs.append((name, None))
        elif _fresh(out, (*args, *kwargs.values())):
            outs.append((name, (out.shape, out.stride(), out.dtype, out.device)))
        else:
            return None
    if launches:
        values = launches[0][2]
        operands = (*args, *results)
        if len(values) < len(operands) or not all(
            _operand(v, a) for v, a in zip(values, operands)
        ):
            return None
        if not all(type(v) in (int, float, bool) for v in values[len(operands) :]):
            return None
        return _Plan(single, outs, (*launches[0], len(operands)))
    return _Plan(single, outs, None)


def stats() -> dict:
    """Hits, misses (recorded calls) and plans held, over every cache.  The counts
    are not locked: under threads they are approximate."""
    caches = list(_CACHES)
    return {
        "hits": sum(c.hits for c in caches),
        "misses": sum(c.misses for c in caches),
        "plans": sum(len(c.plans) for c in caches),
    }


def clear() -> None:
    """Drop every plan (the next call of each signature is recorded again) and
    reset the counts."""
    for cache in list(_CACHES):
        with cache.lock:
            cache.plans.clear()
            cache.hits = cache.misses = 0


class LaunchCache:
    """Plans by call signature for one function (see the module docstring)."""

    def __init__(self):
        self.plans = {}
        self.lock = threading.Lock()
        self.hits = self.misses = 0
        _CACHES.add(self)

    def __call__(self, fn: Callable, args: tuple, kwargs: dict, salt=()):
        if not _ACTIVE or _recording.launches is not None:
            return fn(*args, **kwargs)  # off, or inside a call being recorded
        key = _key(args, kwargs, salt)
        if key is None:
            return fn(*args, **kwargs)
        plan = self.plans.get(key)
        if plan is not None:
            if plan is not _UNCACHEABLE:
                out = plan.run(args, kwargs)
                if out is not _UNCACHEABLE:
                    self.hits += 1
                    return out
            return fn(*args, **kwargs)
        self.misses += 1
        launches = _recording.launches = []
        try:
            result = fn(*args, **kwargs)
        finally:
            _recording.launches = None
        plan = _plan(args, kwargs, result, launches)
        with self.lock:
            if len(self.plans) >= MAX_PLANS:
                del self.plans[next(iter(self.plans))]
            self.plans[key] = _UNCACHEABLE if plan is None else plan
        return result


def cached(wrapper: Callable) -> Callable:
    """A generated wrapper, taking the cache for callers that instantiate one."""
    cache = LaunchCache()

    @functools.wraps(wrapper)
    def call(*args, **kwargs):
        return cache(wrapper, args, kwargs)

    call.launch_cache = cache
    return call
