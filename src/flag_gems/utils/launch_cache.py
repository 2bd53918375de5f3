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
LibEntry's kernel key.  A signature's first ``ADMIT_AFTER`` calls run the usual path
and are only counted; the next runs the usual path too and records its single kernel
launch (the compiled kernel that launch returned); later calls of the same signature
allocate the outputs and launch that compiled kernel with their own pointers and
scalar values.  A signature called only a few times thus costs its key and nothing
more.  A cache's recordings are paid from a credit: ``RECORD_CREDIT`` to start, one
per hit, one per ``MISSES_PER_RECORDING`` misses, misses filling it only up to
``RECORD_CREDIT`` and hits up to ``MAX_CREDIT``: where recorded plans are not hit
(signatures called just past ``ADMIT_AFTER`` times), recording slows to a trickle that
costs little next to the misses, even after a long run of misses or of hits, and it
speeds up again as plans are hit.

The key holds everything that launch depends on: for each tensor its dtype, shape,
strides, device and 16-byte pointer alignment; for each Python scalar its type (and,
for ints, the classes Triton specializes on: == 1, divisible by 16, i32/i64/u64);
which outputs are given; plus a caller's salt (``pointwise_dynamic`` adds the default
dtype and its block-pointer setting).  The current device, current stream and launch
hooks are read at every launch.  Calls that cannot be keyed (tensor subclasses,
StridedBuffer, sparse or named tensors, other scalar types), that launch more than
one kernel, or whose launch was not recorded as described stay on the uncached path.
A call that launched nothing is cached (as its allocations) only if every output is
empty.

The compiled kernel is launched the way the installed Triton's own ``JITFunction.run``
launches it; the cache is active on the versions whose convention it implements
(3.0 and 3.2 to 3.6, see ``_launcher_convention``) and off, every call uncached, on
others.

A full cache (``MAX_PLANS``) admits a new signature only by evicting a plan that had
no hit since the eviction hand last passed it (a clock with one step per admission), so
a round robin over more signatures than the cap keeps the plans it holds.
"""

import collections
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

# Plans kept per cache (one cache per pointwise function and per instantiated
# wrapper); calls of a signature that run uncached before one is recorded (recording
# costs more than a key: a signature called only that often never pays for it); and
# signatures remembered meanwhile; and the recordings a cache may make beyond its hits
# (a hit saves more than a recording costs), plus one per so many misses (a recording
# costs less than half an uncached call: a 32nd of it stays within 2% of the misses),
# and at most so many banked by hits (what a run of hits may pay for after it ends).
MAX_PLANS = 256
ADMIT_AFTER = 2
MAX_SEEN = 4 * MAX_PLANS
RECORD_CREDIT = 8
MISSES_PER_RECORDING = 32
MAX_CREDIT = 4 * RECORD_CREDIT


# The Triton versions the cache was proven on (the Triton matrix: make test-triton).
# 3.1 is not among them: the cpu emulation does not start there.
_PROVEN = {(3, 0), (3, 2), (3, 3), (3, 4), (3, 5), (3, 6)}


def _launcher_convention(version: str):
    """(where the launch hooks live, whether constexprs are passed) for a Triton
    version, or None where the cache is off (any version not in ``_PROVEN``).

    ``JITFunction.run`` launches a compiled kernel as ``run(gx, gy, gz, stream,
    function, packed_metadata, launch_metadata, enter_hook, exit_hook, *params)``
    (each wheel's runtime/jit.py and compiler/compiler.py): ``params`` are the
    non-constexpr parameters on 3.0-3.2 and every parameter in signature order,
    constexprs included, from 3.3 on.  The hooks are class attributes of
    CompiledKernel up to 3.3 and live in ``triton.knobs.runtime`` from 3.4 (None by
    default on 3.4, an empty HookChain on 3.5 and 3.6)."""
    match = re.match(r"(\d+)\.(\d+)", version)
    found = tuple(map(int, match.groups())) if match else None
    if found not in _PROVEN:
        return None
    return ("knobs" if found >= (3, 4) else "CompiledKernel"), found >= (3, 3)


_LAUNCHER = _launcher_convention(triton.__version__)
_ABI_KNOWN = _LAUNCHER is not None
_CONSTEXPRS_PASSED = bool(_LAUNCHER and _LAUNCHER[1])
# where this Triton keeps the launch hooks (read at every launch), imported only on
# the versions that have it
if _LAUNCHER and _LAUNCHER[0] == "knobs":
    from triton import knobs as _knobs

    def _hook_holder():
        return _knobs.runtime

    _HOOK_CHAIN = getattr(_knobs, "HookChain", None)
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
_SCALARS = frozenset((int, float, bool))  # what a plan's tail may hold
_HAS_NAMES = hasattr(torch.Tensor, "has_names")
_CACHES = weakref.WeakSet()
_CACHES_LOCK = threading.Lock()  # guards _CACHES (added to by first calls)
# on, and the launcher's convention known (read at every call: one global)
_ACTIVE = os.environ.get("FLAGGEMS_LAUNCH_CACHE", "1") != "0" and _ABI_KNOWN


def source_named(path, source: str) -> str:
    """``path`` (a generated wrapper's file) with a hash of ``source`` in its name.

    The wrappers launch through :func:`recorded_launch`, so their source differs from
    what a FlagGems without this cache generates under the same name; two installs
    sharing a code cache directory then never load each other's wrapper."""
    stem, ext = os.path.splitext(str(path))
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    return f"{stem}_{digest}{ext}"


def set_enabled(enabled: bool) -> None:
    """Turn the cache on or off (env FLAGGEMS_LAUNCH_CACHE=0 starts it off)."""
    global _ACTIVE
    _ACTIVE = bool(enabled) and _ABI_KNOWN


def is_enabled() -> bool:
    return _ACTIVE


class _Recording(threading.local):
    # a list while this thread records a call's launches; _THROUGH while a cache runs
    # a call uncached (one attribute: a hit reads it once).  Nested caches stand aside
    # while it is not None.
    launches = None


_recording = _Recording()
_THROUGH = ()  # (not a list: recorded_launch records nothing then)


def recorded_launch(kernel, grid):
    """``kernel[grid]``, which also records the launch while a call is recorded.

    The generated wrappers launch through this.  The record is the compiled kernel the
    launch itself returned (LibEntry returns it with its constexprs)."""
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
        return None  # nothing compiled was launched (a compile hook, an interpreter)
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
    device = driver.active.get_current_device()
    return compiled, grid, values, device


_EMPTY = inspect.Parameter.empty
_PARAMS = weakref.WeakKeyDictionary()  # JITFunction -> ((num, name, default), ...)


def _params(fn):
    """(num, name, default) of each parameter the launcher takes, in order."""
    params = _PARAMS.get(fn)
    if params is None:
        params = _PARAMS[fn] = tuple(
            (p.num, p.name, p.default)
            for p in fn.params
            if _CONSTEXPRS_PASSED or not p.is_constexpr
        )
    return params


def _int_class(v: int):
    if -(2**31) <= v < 2**31:
        return "i32"
    return "u64" if 2**63 <= v < 2**64 else "i64"


def _describe(arg):
    """The part of one non-tensor argument a launch depends on (TypeError if unknown)."""
    t = type(arg)
    if t is float or t is bool or arg is None:
        return t
    if t is int:
        return int, arg == 1, arg % 16 == 0, _int_class(arg)
    raise TypeError(t)


def _key(args, kwargs, salt):
    """(salt, one part per argument, positional then keyword, and the keywords' names
    if any), or None for a call that cannot be keyed.  A tensor's part is inline (the
    hit path's one call per tensor saved): dtype, shape, strides, device and 16-byte
    alignment; stride() raises for sparse and other non-strided layouts; named tensors
    (torch < 2.13) stay uncached: the uncached path's empty_like keeps names."""
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


class _Plan:
    """What one signature's call does: allocate these outputs, launch this kernel.

    Everything here is fixed by the key; what is not (the current device, its
    stream, the launch hooks, pointers and scalar values) is read at each run."""

    __slots__ = (
        "single", "outs", "alloc", "given", "kernel", "launcher", "handles", "grid",
        "tail", "device", "used",
    )  # fmt: skip

    def __init__(self, single, outs, launch):
        self.single, self.outs, self.kernel = single, tuple(outs), None
        self.used = False  # hit since the eviction hand last passed it
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
            hooks = _hook_holder()
            enter, leave = hooks.launch_enter_hook, hooks.launch_exit_hook
            chain = _HOOK_CHAIN
            if (enter is None or (type(enter) is chain and not enter.calls)) and (
                leave is None or (type(leave) is chain and not leave.calls)
            ):  # no hook (3.0-3.4), or empty hook chains (3.5-3.6): nothing to call
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
        if not _SCALARS.issuperset(map(type, values[len(operands) :])):
            return None
        return _Plan(single, outs, (*launches[0], len(operands)))
    if any(out.numel() for out in results):
        return None  # it wrote its outputs without a recorded launch
    return _Plan(single, outs, None)


def _caches() -> list:
    with _CACHES_LOCK:
        return list(_CACHES)


def stats() -> dict:
    """Hits, misses (calls that found no plan), recordings (misses that recorded) and
    plans held, over every cache.  The hit counts are not locked: under threads they
    are approximate."""
    caches = _caches()
    return {
        "hits": sum(c.hits for c in caches),
        "misses": sum(c.misses for c in caches),
        "recordings": sum(c.recordings for c in caches),
        "plans": sum(len(c.plans) for c in caches),
    }


def clear() -> None:
    """Drop every plan and remembered signature (each signature starts over) and
    reset the counts."""
    for cache in _caches():
        with cache.lock:
            cache.plans.clear()
            cache.seen.clear()
            cache._reset_counts()


class LaunchCache:
    """Plans by call signature for one function (see the module docstring)."""

    def __init__(self):
        # key -> _Plan or _UNCACHEABLE, oldest first (an OrderedDict: on a dict,
        # next(iter(d)) walks past the slots that deletions at its front left, about
        # 1 us at MAX_PLANS keys; popitem(last=False) does not); and hash(key) ->
        # uncached calls so far (a dict: each of its operations is atomic, also
        # without the GIL, and it is emptied when full)
        self.plans = collections.OrderedDict()
        self.seen = {}
        self.lock = threading.Lock()
        self._reset_counts()
        with _CACHES_LOCK:
            _CACHES.add(self)

    def _reset_counts(self) -> None:
        self.hits = self.misses = self.recordings = 0
        # what _credit() last found (None: not asked since the cache was made or
        # cleared), and the counts it had seen then
        self.credit, self._hits_at, self._misses_at = None, 0, 0

    def __call__(self, fn: Callable, args: tuple, kwargs: dict, salt=()):
        if not _ACTIVE or _recording.launches is not None:
            # off, or inside a call that a cache records or runs uncached (the
            # instantiated wrapper that pointwise_dynamic calls has a cache too)
            return fn(*args, **kwargs)
        key = _key(args, kwargs, salt)
        if key is None:
            return _uncached(fn, args, kwargs)
        plan = self.plans.get(key)
        if plan is not None:
            if plan is not _UNCACHEABLE:
                out = plan.run(args, kwargs)
                if out is not _UNCACHEABLE:
                    plan.used = True
                    self.hits += 1
                    return out
            return _uncached(fn, args, kwargs)
        self.misses += 1
        # a signature's first ADMIT_AFTER calls are only counted, by the key's hash
        # and without the lock (a count lost to a race only records it a call later)
        signature, seen = hash(key), self.seen
        calls = seen.get(signature, 0)
        if calls < ADMIT_AFTER:
            if not calls and len(seen) >= MAX_SEEN:
                seen.clear()  # (bounded: the counts so far start over)
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
        """Whether to record this call of a signature counted ``ADMIT_AFTER`` times:
        while the recordings stay within their credit (else it stays uncached and is
        asked again at its next call), and room for it (at most one held plan is
        examined: evicted if it had no hit since the hand last passed it, else moved
        to the back and the newcomer not admitted).

        Signatures are counted by the key's hash: a first sighting stores one int, not
        a key of nested tuples.  Two keys of one hash share a count, so one of them
        may be recorded sooner; what is recorded is still keyed by the whole key."""
        with self.lock:
            if self._credit() < MISSES_PER_RECORDING:
                return False
            plans = self.plans
            if len(plans) >= MAX_PLANS:
                oldest, victim = plans.popitem(last=False)
                if victim is not _UNCACHEABLE and victim.used:
                    victim.used = False
                    plans[oldest] = victim  # a second chance, at the back
                    return False
            self.seen.pop(signature, None)  # (None: cleared meanwhile)
            self.recordings += 1
            self.credit -= MISSES_PER_RECORDING
            return True

    def _credit(self) -> int:
        """The recordings this cache may still make, in misses (under its lock).

        It starts at ``RECORD_CREDIT`` recordings; each hit since the last ask adds
        one recording, each miss a ``MISSES_PER_RECORDING``-th of one, but misses fill
        it only up to ``RECORD_CREDIT`` (at least one) recordings, and hits up to
        ``MAX_CREDIT``: a run of one-off signatures, or of hits, does not bank
        recordings for a later run of signatures recorded and never hit (it would
        spend them all in a burst)."""
        per = MISSES_PER_RECORDING
        credit = RECORD_CREDIT * per if self.credit is None else self.credit
        if self.hits != self._hits_at:  # (hits never lower it)
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
    """A generated wrapper, taking the cache for callers that instantiate one."""
    cache = LaunchCache()

    @functools.wraps(wrapper)
    def call(*args, **kwargs):
        return cache(wrapper, args, kwargs)

    call.launch_cache = cache
    return call
