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

"""Per-signature launch cache for ``pointwise_dynamic``: a proposal for issue #4812.

Off unless ``FLAGGEMS_LAUNCH_CACHE=1`` is set (read at import) or
:func:`set_enabled` turns it on.

A pointwise call spends most of its host time on what its signature alone decides:
type promotion, the output layout, tile sizes and grid, LibEntry's kernel key.  A
signature's first ``ADMIT_AFTER`` calls run the usual path and are counted; the next
runs it too and records its one kernel launch; later calls allocate the outputs and
launch that compiled kernel with their own pointers and scalars.  Recordings are paid
from a credit (``RECORD_CREDIT`` to start, one per hit up to ``MAX_CREDIT``, one per
``MISSES_PER_RECORDING`` misses up to ``RECORD_CREDIT``), so signatures that are never
hit soon stop paying for recordings.  A full cache (``MAX_PLANS``) evicts by clock: a
plan hit since the hand last passed it is kept.

The key holds what the launch depends on: per tensor its dtype, shape, strides, device
and 16-byte alignment; per Python scalar its type (for ints, what Triton specializes
on: == 1, divisible by 16, i32/i64/u64); which outputs are given; the caller's salt
(the default dtype, the block-pointer setting).  The current device, stream and launch
hooks are read at each launch.  Calls it cannot key (tensor subclasses, StridedBuffer,
sparse or named tensors, other scalars), calls that launch more than one kernel, and
calls that wrote their output without a recorded launch stay on the usual path.
"""

import collections
import contextlib
import functools
import hashlib
import inspect
import os
import re
import threading
import weakref
from typing import Callable

import torch
import triton
from triton.runtime.driver import driver
from triton.runtime.jit import JITFunction

from flag_gems.utils.libentry import LibEntry
from flag_gems.utils.tensor_wrapper import StridedBuffer

# Plans per cache (one cache per pointwise function and per instantiated wrapper);
# uncached calls of a signature before it is recorded, and signatures counted
# meanwhile; the recording credit (see the module docstring: a recording costs less
# than half an uncached call, so one per 32 misses stays within 2% of them).
MAX_PLANS = 256
ADMIT_AFTER = 2
MAX_SEEN = 4 * MAX_PLANS
RECORD_CREDIT = 8
MISSES_PER_RECORDING = 32
MAX_CREDIT = 4 * RECORD_CREDIT

# The launch.  A hit calls the compiled kernel's launcher as Triton's own
# JITFunction.run does: ``kernel.run(gx, gy, gz, stream, kernel.function,
# kernel.packed_metadata, launch_metadata, enter_hook, exit_hook, *params)``.  Triton
# 3.0 to 3.6 all launch this way (params: the non-constexpr parameters up to 3.2,
# every parameter from 3.3; the hooks on CompiledKernel up to 3.3, in
# triton.knobs.runtime from 3.4), and FlagGems' KunlunXIN tle_copy launches
# triton-xpu kernels through the same call.  It is probed, never assumed: on a Triton
# outside _PROVEN the cache stays off; a compiled kernel without run, function and
# packed_metadata is not recorded; a launcher that refuses the arguments (TypeError,
# raised before it launches) drops the plan.  Those calls take the plain
# ``fn[grid](...)`` launch.  (3.1 is left out: it was not tried.)
_PROVEN = {(3, 0), (3, 2), (3, 3), (3, 4), (3, 5), (3, 6)}


def _launcher_convention(version: str):
    """(where the launch hooks live, whether constexprs are passed), or None where
    the cache stays off."""
    match = re.match(r"(\d+)\.(\d+)", version)
    found = tuple(map(int, match.groups())) if match else None
    if found not in _PROVEN:
        return None
    return ("knobs" if found >= (3, 4) else "CompiledKernel"), found >= (3, 3)


_LAUNCHER = _launcher_convention(triton.__version__)
_ABI_KNOWN = _LAUNCHER is not None
_CONSTEXPRS_PASSED = bool(_LAUNCHER and _LAUNCHER[1])
if _LAUNCHER and _LAUNCHER[0] == "knobs":
    from triton import knobs as _knobs

    def _hook_holder():
        return _knobs.runtime

    _HOOK_CHAIN = getattr(_knobs, "HookChain", None)  # (3.5+; None by default on 3.4)
elif _LAUNCHER:
    from triton.compiler.compiler import CompiledKernel as _CompiledKernel

    def _hook_holder():
        return _CompiledKernel

    _HOOK_CHAIN = None
else:  # the cache stays off and reads no hooks
    _hook_holder, _HOOK_CHAIN = None, None


_TENSOR, _PARAMETER = torch.Tensor, torch.nn.Parameter
_PLAIN_TENSORS = (_TENSOR, _PARAMETER)
_UNCACHEABLE = object()
_REFUSED = object()  # a launcher refused the plan's arguments
_SCALARS = frozenset((int, float, bool))  # what a plan's tail may hold
_HAS_NAMES = hasattr(torch.Tensor, "has_names")
_CACHES = weakref.WeakSet()
_CACHES_LOCK = threading.Lock()  # guards _CACHES (added to by first calls)
_ACTIVE = os.environ.get("FLAGGEMS_LAUNCH_CACHE") == "1" and _ABI_KNOWN


def set_enabled(enabled: bool) -> None:
    """Turn the cache on or off (it stays off on a Triton outside ``_PROVEN``)."""
    global _ACTIVE
    _ACTIVE = bool(enabled) and _ABI_KNOWN


def is_enabled() -> bool:
    return _ACTIVE


@contextlib.contextmanager
def enabled(on: bool = True):
    """The cache on (or off) for a block, the previous setting restored after."""
    was = _ACTIVE
    set_enabled(on)
    try:
        yield
    finally:
        set_enabled(was)


def source_named(path, source: str) -> str:
    """``path`` (a generated wrapper's file) with a hash of ``source`` in its name:
    installs with and without this cache sharing a code cache never load each
    other's wrapper."""
    stem, ext = os.path.splitext(str(path))
    return f"{stem}_{hashlib.sha256(source.encode()).hexdigest()[:16]}{ext}"


class _Recording(threading.local):
    # a list while this thread records a call's launches; _THROUGH while a cache runs
    # a call uncached.  Nested caches stand aside while it is not None.
    launches = None


_recording = _Recording()
_THROUGH = ()


def recorded_launch(kernel, grid):
    """``kernel[grid]``, recording the launch while a call is recorded (the generated
    wrappers launch through this; LibEntry returns the compiled kernel it launched)."""
    launches = _recording.launches
    if type(launches) is not list:
        return kernel[grid]

    def launch(*args, **kwargs):
        launched = kernel[grid](*args, **kwargs)
        launches.append(_record_launch(kernel, grid, args, kwargs, launched))
        return launched

    return launch


def _record_launch(kernel, grid, args, kwargs, launched):
    libentry = type(kernel) is LibEntry
    fn = kernel.fn if libentry else kernel
    if not isinstance(fn, JITFunction) or getattr(fn, "pre_run_hooks", None):
        return None  # autotuned/heuristic kernels, or hooks a cached launch would skip
    if not (isinstance(grid, tuple) and all(type(g) is int for g in grid)):
        return None
    compiled = launched[0] if libentry and type(launched) is tuple else launched
    if not all(hasattr(compiled, a) for a in ("run", "function", "packed_metadata")):
        return None  # no compiled kernel with the launcher the cache calls
    values = []  # the parameters the launcher takes, in signature order
    for num, name, default in _params(fn):
        if num < len(args):
            values.append(args[num])
        elif name in kwargs:
            values.append(kwargs[name])
        elif default is not _EMPTY:
            values.append(default)
        else:
            return None
    grid = tuple(grid) + (1,) * (3 - len(grid))
    return compiled, grid, values, driver.active.get_current_device()


_EMPTY = inspect.Parameter.empty
_PARAMS = weakref.WeakKeyDictionary()  # JITFunction -> ((num, name, default), ...)


def _params(fn):
    params = _PARAMS.get(fn)
    if params is None:
        params = _PARAMS[fn] = tuple(
            (p.num, p.name, p.default)
            for p in fn.params
            if _CONSTEXPRS_PASSED or not p.is_constexpr
        )
    return params


def _describe(arg):
    """What a launch depends on of one non-tensor argument (TypeError if unknown)."""
    t = type(arg)
    if t is float or t is bool or arg is None:
        return t
    if t is int:
        size = "i32" if -(2**31) <= arg < 2**31 else "u64" if arg >= 2**63 else "i64"
        return int, arg == 1, arg % 16 == 0, size
    raise TypeError(t)


def _key(args, kwargs, salt):
    """(salt, one part per argument, then the keywords' names if any), or None for a
    call that cannot be keyed.  stride() raises for sparse and other non-strided
    layouts; named tensors stay uncached (the usual path's empty_like keeps names)."""
    parts = [salt]
    try:
        for arg in (*args, *kwargs.values()) if kwargs else args:
            t = type(arg)
            if t is _TENSOR or t is _PARAMETER:
                if _HAS_NAMES and arg.has_names():
                    return None
                aligned = arg.data_ptr() % 16 == 0
                parts.append(
                    (arg.dtype, arg.shape, arg.stride(), arg.get_device(), aligned)
                )
            else:
                parts.append(_describe(arg))
    except (TypeError, RuntimeError, NotImplementedError):
        return None
    if kwargs:
        parts.append(tuple(kwargs))
    return tuple(parts)


def _empty(alloc):
    shape, stride, dtype, device = alloc
    out = torch.empty_strided(shape, stride, dtype=dtype, device=device)
    return out if out.data_ptr() % 16 == 0 else None  # the alignment compiled for


class _Plan:
    """One signature's call: allocate these outputs, launch this kernel.  What the
    key does not fix (device, stream, hooks, pointers, values) is read at each run."""

    __slots__ = (
        "single", "outs", "alloc", "kernel", "launcher", "handles", "grid", "tail",
        "device", "used",
    )  # fmt: skip

    def __init__(self, single, outs, launch):
        self.single, self.outs, self.kernel = single, tuple(outs), None
        self.used = False  # hit since the eviction hand last passed it
        self.alloc = outs[0][1] if len(outs) == 1 else None  # one output, allocated
        if launch is not None:
            self.kernel, self.grid, values, self.device, n_operands = launch
            self.launcher = self.kernel.run
            self.handles = (self.kernel.function, self.kernel.packed_metadata)
            self.tail = tuple(values[n_operands:])

    def run(self, args, kwargs):
        if self.alloc is not None:  # (the common case)
            out = _empty(self.alloc)
            if out is None:
                return _UNCACHEABLE
            outs = (out,)
        else:
            outs = [kwargs[n] if a is None else _empty(a) for n, a in self.outs]
            if any(out is None for out in outs):
                return _UNCACHEABLE
        if self.kernel is not None:
            active = driver.active
            device = active.get_current_device()
            if device != self.device:
                return _UNCACHEABLE  # the usual path enters the device guard
            stream = active.get_current_stream(device)
            values = (*args, *outs, *self.tail)
            hooks, chain = _hook_holder(), _HOOK_CHAIN
            enter, leave = hooks.launch_enter_hook, hooks.launch_exit_hook
            if (enter is None or (type(enter) is chain and not enter.calls)) and (
                leave is None or (type(leave) is chain and not leave.calls)
            ):  # no hook, or empty hook chains: nothing to call
                meta = enter = leave = None
            else:
                meta = self.kernel.launch_metadata(self.grid, stream, *values)
            gx, gy, gz = self.grid
            try:
                self.launcher(
                    gx, gy, gz, stream, *self.handles, meta, enter, leave, *values
                )
            except TypeError:
                if meta is not None:
                    raise  # (a hook's own error: the kernel may have launched)
                return _REFUSED  # parsed before launching: nothing was written
        return outs[0] if self.single else tuple(outs)


def _operand(value, arg) -> bool:
    """Whether the launch received ``arg`` itself (a tensor may be re-wrapped)."""
    if value is arg:
        return True
    if isinstance(value, StridedBuffer) and type(arg) in _PLAIN_TENSORS:
        return (
            value.unwrap() is arg
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
    return storage.nbytes() == 0 or all(
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
    if not launches:  # cached as its allocations only if it wrote nothing
        return (
            None if any(out.numel() for out in results) else _Plan(single, outs, None)
        )
    values, operands = launches[0][2], (*args, *results)
    if len(values) < len(operands) or not all(map(_operand, values, operands)):
        return None
    if not _SCALARS.issuperset(map(type, values[len(operands) :])):
        return None
    return _Plan(single, outs, (*launches[0], len(operands)))


def _caches() -> list:
    with _CACHES_LOCK:
        return list(_CACHES)


def stats() -> dict:
    """Hits, misses, recordings and plans held over every cache (the counts are not
    locked: under threads they are approximate)."""
    caches = _caches()
    return {
        "hits": sum(c.hits for c in caches),
        "misses": sum(c.misses for c in caches),
        "recordings": sum(c.recordings for c in caches),
        "plans": sum(len(c.plans) for c in caches),
    }


def clear() -> None:
    """Drop every plan and counted signature, and reset the counts."""
    for cache in _caches():
        with cache.lock:
            cache.plans.clear()
            cache.seen.clear()
            cache._reset_counts()


class LaunchCache:
    """Plans by call signature for one function (see the module docstring)."""

    def __init__(self):
        # key -> _Plan or _UNCACHEABLE, oldest first (popitem(last=False) is O(1) on an
        # OrderedDict); hash(key) -> uncached calls so far (a dict: atomic operations,
        # emptied when full)
        self.plans = collections.OrderedDict()
        self.seen = {}
        self.lock = threading.Lock()
        self._reset_counts()
        with _CACHES_LOCK:
            _CACHES.add(self)

    def _reset_counts(self) -> None:
        self.hits = self.misses = self.recordings = 0
        # the credit _credit() last found (None: not asked yet) and the counts then
        self.credit, self._hits_at, self._misses_at = None, 0, 0

    def __call__(self, fn: Callable, args: tuple, kwargs: dict, salt=()):
        if not _ACTIVE or _recording.launches is not None:
            # off, or inside a call another cache records or runs uncached (the
            # wrapper pointwise_dynamic instantiates has a cache too)
            return fn(*args, **kwargs)
        key = _key(args, kwargs, salt)
        if key is None:
            return _uncached(fn, args, kwargs)
        plan = self.plans.get(key)
        if plan is not None:
            if plan is not _UNCACHEABLE:
                out = plan.run(args, kwargs)
                if out is _REFUSED:
                    with self.lock:
                        if key in self.plans:
                            self.plans[key] = _UNCACHEABLE
                elif out is not _UNCACHEABLE:
                    plan.used = True
                    self.hits += 1
                    return out
            return _uncached(fn, args, kwargs)
        self.misses += 1
        # a signature's first calls are counted by the key's hash, without the lock
        # (a count lost to a race only records it a call later)
        signature, seen = hash(key), self.seen
        calls = seen.get(signature, 0)
        if calls < ADMIT_AFTER:
            if not calls and len(seen) >= MAX_SEEN:
                seen.clear()
            seen[signature] = calls + 1
            return _uncached(fn, args, kwargs)
        if not self._admit(signature):
            return _uncached(fn, args, kwargs)
        launches = _recording.launches = []
        try:
            result = fn(*args, **kwargs)
        finally:
            _recording.launches = None
        plan = _plan(args, kwargs, result, launches)
        with self.lock:
            plans = self.plans
            while len(plans) >= MAX_PLANS and key not in plans:  # admitted meanwhile
                plans.popitem(last=False)
            plans[key] = _UNCACHEABLE if plan is None else plan
        return result

    def _admit(self, signature: int) -> bool:
        """Whether to record a signature counted ``ADMIT_AFTER`` times: while the
        credit lasts, and where there is room (the oldest plan is evicted unless it
        was hit since the hand last passed it: then it moves to the back, and the
        newcomer waits for its next call).  Two keys of one hash share a count; plans
        are still keyed by the whole key."""
        with self.lock:
            if self._credit() < MISSES_PER_RECORDING:
                return False
            plans = self.plans
            if len(plans) >= MAX_PLANS:
                oldest, victim = plans.popitem(last=False)
                if victim is not _UNCACHEABLE and victim.used:
                    victim.used = False
                    plans[oldest] = victim
                    return False
            self.seen.pop(signature, None)  # (None: cleared meanwhile)
            self.recordings += 1
            self.credit -= MISSES_PER_RECORDING
            return True

    def _credit(self) -> int:
        """The recordings left, in misses (under the lock): hits since the last ask
        add one each up to ``MAX_CREDIT``, misses a ``MISSES_PER_RECORDING``-th each up
        to ``RECORD_CREDIT``, so neither a run of one-off signatures nor of hits banks
        a burst of recordings for later."""
        per = MISSES_PER_RECORDING
        credit = RECORD_CREDIT * per if self.credit is None else self.credit
        if self.hits != self._hits_at:
            gain = (self.hits - self._hits_at) * per
            credit = max(credit, min(credit + gain, MAX_CREDIT * per))
        cap = max(RECORD_CREDIT, 1) * per
        if credit < cap:
            credit = min(credit + self.misses - self._misses_at, cap)
        self._hits_at, self._misses_at = self.hits, self.misses
        self.credit = credit
        return credit


def _uncached(fn, args, kwargs):
    state = _recording
    state.launches = _THROUGH
    try:
        return fn(*args, **kwargs)
    finally:
        state.launches = None


def cached(wrapper: Callable) -> Callable:
    """A generated wrapper, with a cache for callers that instantiate one."""
    cache = LaunchCache()

    @functools.wraps(wrapper)
    def call(*args, **kwargs):
        if not _ACTIVE:  # (off, the default: the wrapper as before)
            return wrapper(*args, **kwargs)
        return cache(wrapper, args, kwargs)

    call.launch_cache = cache
    return call
