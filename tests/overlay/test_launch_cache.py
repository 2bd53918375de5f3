"""PR 3's launch cache (flag_gems/utils/launch_cache.py) beyond the PR's own test:
hits, misses per key field, per-launch device/stream/hooks, threads, recording credit,
fallbacks, and bit-exact results against the uncached path (the cache is opt-in: the
autouse fixture turns it on; cpu mode runs Triton's interpreter)."""

import contextlib
import inspect
import sys
import threading
import types
from unittest import mock

import pytest

from copyfix import emulation

MODE = emulation.activate()  # before flag_gems is imported

import torch  # noqa: E402
import triton  # noqa: E402

import flag_gems.ops.copy  # noqa: E402,F401  (the generic copy_, PR 2)
from flag_gems.utils import launch_cache as lc  # noqa: E402
from flag_gems.utils.libentry import LibEntry  # noqa: E402
from flag_gems.utils.pointwise_dynamic import pointwise_dynamic as generic_pd  # noqa: E402
from flag_gems.utils.tensor_wrapper import StridedBuffer  # noqa: E402

pytestmark = pytest.mark.harness
DEV = emulation.device()


@triton.jit
def _axpy(x, a, y):
    return x * a + y


@triton.jit
def _pair(x):
    return x + 1, x * 2


def _make(pd):
    axpy = pd(is_tensor=[True, False, True], promotion_methods=[(0, 1, 2, "DEFAULT")])(
        _axpy
    )
    pair = pd(num_outputs=2, promotion_methods=[(0, "DEFAULT"), (0, "DEFAULT")])(_pair)
    return types.SimpleNamespace(axpy=axpy, pair=pair)


FNS = _make(generic_pd)


def rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).to(DEV)


def uncached(call, *tensors):
    """``call`` on clones of ``tensors`` with the cache off: what the base computes."""
    clones = [t.clone() for t in tensors]
    with lc.enabled(False):
        return call(*clones), clones


def same(a, b):
    """Bit for bit, with the same layout."""
    if isinstance(a, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    layout = a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
    bits = lambda t: t.cpu().contiguous().view(-1).view(torch.uint8)  # noqa: E731
    return layout and (a.numel() == 0 or torch.equal(bits(a), bits(b)))


def counts(cache):
    return cache.hits, cache.misses


# calls of a signature until one is recorded: ADMIT_AFTER uncached ones, then that one
N = lc.ADMIT_AFTER + 1


def warm(f, *args, **kwargs):
    """Call ``f`` until its signature holds a plan (the last call records it)."""
    for _ in range(N):
        out = f(*args, **kwargs)
    return out


@pytest.fixture(autouse=True)
def fresh_plans():
    """The cache turned on (it is opt-in) with no plan, the setting restored after."""
    with lc.enabled(True):
        lc.clear()
        yield


# ----------------------------------------------------------------- hits and misses


def test_first_calls_are_the_uncached_path_and_a_hit_skips_it():
    f = FNS.axpy
    x, y = rand(4, 6), rand(4, 6, seed=1)
    cache = f._launch_cache
    stock_run = LibEntry.run
    with (
        mock.patch.object(f, "prepare_args", wraps=f.prepare_args) as prepare,
        mock.patch.object(
            LibEntry, "run", autospec=True, side_effect=stock_run
        ) as entry,
    ):
        for k in range(1, N):  # counted only
            zeroth = f(x, 2.0, y)
            assert prepare.call_count == k and entry.call_count == k
            assert counts(cache) == (0, k) and not cache.plans
        first = f(x, 2.0, y)  # recorded
        assert prepare.call_count == N and entry.call_count == N
        assert counts(cache) == (0, N) and len(cache.plans) == 1
        (plan,) = cache.plans.values()
        x2, y2 = rand(4, 6, seed=2), rand(4, 6, seed=3)
        kernel, launcher = plan.kernel, plan.launcher
        launches = []
        plan.launcher = lambda *a: launches.append(a[4]) or launcher(*a)
        try:
            second = f(x2, 3.0, y2)
        finally:
            plan.launcher = launcher
        assert prepare.call_count == N and entry.call_count == N  # derivations skipped
        assert launches == [kernel.function]  # the recorded kernel, once
        assert counts(cache) == (1, N)
    assert same(zeroth, uncached(lambda a, b: f(a, 2.0, b), x, y)[0])
    assert same(first, zeroth)
    assert same(second, uncached(lambda a, b: f(a, 3.0, b), x2, y2)[0])


def test_instantiated_wrapper_hits_too():
    """Callers that instantiate a wrapper themselves (copy_) get the cache as well."""
    f = FNS.axpy
    x, y, out = rand(3, 5), rand(3, 5, seed=1), torch.empty(5, 3, device=DEV).t()
    wrapper = f.instantiate(2)
    for _ in range(N):  # counted, then recorded
        assert wrapper(x, 2.0, y, out0=out) is out
    ref = uncached(lambda a, b, o: wrapper(a, 2.0, b, out0=o), x, y, out)[1][2]
    assert same(out, ref)
    out.zero_()
    assert wrapper(x, 2.0, y, out0=out) is out
    assert counts(wrapper.launch_cache) == (1, N) and same(out, ref)


def test_one_cache_per_call():
    """A call through pointwise_dynamic is keyed once: the inner wrapper's cache idles."""
    f = FNS.axpy
    x = rand(4, 6)
    with mock.patch.object(lc, "_key", wraps=lc._key) as key:
        for _ in range(N + 1):  # counted, recorded, a hit
            f(x, 2.0, x)
    assert key.call_count == N + 1
    inner = f.instantiate(2).launch_cache
    assert (inner.hits, inner.misses, inner.seen, inner.plans) == (0, 0, {}, {})
    assert f._launch_cache.hits == 1


def _signature_pairs():
    """(name, call A, call B): B differs from A in exactly one key field."""
    x = rand(4, 6)
    f32 = lambda f, a, s=2.0, b=None, **kw: f(a, s, a if b is None else b, **kw)  # noqa: E731
    big = torch.empty(4 * 6 + 1, device=DEV)
    off = big[1:].view(4, 6)  # 4 bytes past a 16-byte boundary
    off.copy_(x)
    return {
        "dtype": (lambda f: f32(f, x), lambda f: f32(f, x.double())),
        "shape": (lambda f: f32(f, x), lambda f: f32(f, x[:2])),  # same strides
        "stride": (lambda f: f32(f, x), lambda f: f32(f, x.t().contiguous().t())),
        "broadcast": (lambda f: f32(f, x, b=x), lambda f: f32(f, x, b=x[:1])),
        "out_given": (
            lambda f: f32(f, x),
            lambda f: f32(f, x, out0=torch.empty(6, 4, device=DEV).t()),
        ),
        "scalar_type": (lambda f: f32(f, x, 2.0), lambda f: f32(f, x, 2)),
        "int_class": (lambda f: f32(f, x, 3), lambda f: f32(f, x, 2**40 + 3)),
        "int_is_one": (lambda f: f32(f, x, 3), lambda f: f32(f, x, 1)),
        "int_div16": (lambda f: f32(f, x, 3), lambda f: f32(f, x, 32)),
        "alignment": (lambda f: f32(f, x), lambda f: f32(f, off)),
        "default_dtype": (
            lambda f: f32(f, x.int(), 2.5),
            lambda f: _float64(f32, f, x),
        ),
    }


def _float64(call, f, x):
    with _default_dtype(torch.float64):
        return call(f, x.int(), 2.5)


@contextlib.contextmanager
def _default_dtype(dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


PAIRS = sorted(_signature_pairs())


def _scenario(field):
    """Call B, after A was recorded, misses and is bit-exact to the uncached path."""
    f = FNS.axpy
    a, b = _signature_pairs()[field]
    for _ in range(N + 1):  # recorded, then a hit of A's plan
        a(f)
    misses = f._launch_cache.misses
    got = b(f)
    with lc.enabled(False):
        want = b(f)
    return f._launch_cache.misses == misses + 1 and same(got, want)


@pytest.mark.parametrize("field", PAIRS)
def test_a_change_of_any_key_field_misses(field):
    assert _scenario(field)


def _dropping(field):
    """lc._key with one field dropped: what a careless key would hold."""
    stock_key = lc._key
    tensor_field = {"dtype": 0, "shape": 1, "stride": 2, "broadcast": 1, "alignment": 4}
    int_field = {"int_class": 3, "int_is_one": 1, "int_div16": 2}

    def part(d):
        if field == "scalar_type" and (
            d is float or (isinstance(d, tuple) and d[0] is int)
        ):
            return "scalar"
        if isinstance(d, tuple) and d and d[0] is int:  # scalar int
            i = int_field.get(field)
            return d if i is None else d[:i] + d[i + 1 :]
        if isinstance(d, tuple) and d and isinstance(d[0], torch.dtype):  # tensor
            i = tensor_field.get(field)
            return d if i is None else d[:i] + d[i + 1 :]
        return d

    def key(args, kwargs, salt):
        k = stock_key(args, kwargs, salt)
        if k is None:
            return k
        if field == "out_given":
            return k[: 1 + len(args)]  # (salt, args): which outputs are given left out
        if field == "default_dtype":
            return ((k[0][0],), *k[1:])  # the salt without the default dtype
        return (k[0], *map(part, k[1:]))

    return [mock.patch.object(lc, "_key", key)]


@pytest.mark.parametrize("field", PAIRS)
def test_dropping_a_key_field_is_caught(field):
    """The scenario above fails when the key leaves that field out."""
    with contextlib.ExitStack() as stack:
        for p in _dropping(field):
            stack.enter_context(p)
        try:
            caught = not _scenario(field)
        except Exception:  # a stale plan launched with the wrong arguments
            caught = True
    assert caught


def test_key_holds_the_device_of_each_tensor():
    x = rand(2, 3)
    key = lc._key((x,), {}, ())
    assert key[1][3] == x.get_device()
    # the same tensor seen on another device (cpu mode has one device to offer)
    with mock.patch.object(torch.Tensor, "get_device", lambda self: 7):
        other = lc._key((x,), {}, ())
    assert other != key and other[1][3] == 7
    assert other[1][:3] == key[1][:3] and other[1][4] == key[1][4]


def test_current_device_and_stream_are_read_at_each_launch():
    f = FNS.axpy
    x = rand(4, 6)
    warm(f, x, 2.0, x)
    driver = triton.runtime.driver.active
    streams = []
    stock_stream = driver.get_current_stream

    def stream(device=None):
        streams.append(device)
        return stock_stream(device)

    with mock.patch.object(driver, "get_current_stream", side_effect=stream):
        f(x, 2.0, x)
        f(x, 2.0, x)
    assert len(streams) == 2  # one read per hit
    (plan,) = f._launch_cache.plans.values()
    stock_device = driver.get_current_device
    answers = iter([plan.device + 1])  # the cache's read sees another device current

    def device():
        other = next(answers, None)
        return stock_device() if other is None else other

    with mock.patch.object(driver, "get_current_device", side_effect=device):
        hits = f._launch_cache.hits
        got = f(x, 2.0, x)  # the uncached path, with its device guard
        assert f._launch_cache.hits == hits
    assert same(got, uncached(lambda a: f(a, 2.0, a), x)[0])


@contextlib.contextmanager
def _enter_hook(hook):
    """A launch-enter hook where this Triton keeps it (HookChain or plain attribute)."""
    holder = emulation.interpreter.hook_holder()
    chain = holder.launch_enter_hook
    if hasattr(chain, "add"):
        chain.add(hook)
        try:
            yield
        finally:
            chain.remove(hook)
        return
    holder.launch_enter_hook = hook
    try:
        yield
    finally:
        holder.launch_enter_hook = chain


def test_launch_hooks_see_every_launch():
    f = FNS.axpy
    x = rand(4, 6)
    seen = []
    with _enter_hook(lambda meta: seen.append(meta)):
        warm(f, x, 2.0, x)
        # (how many uncached launches the hook sees depends on Triton; the hit counts)
        assert seen
        before = len(seen)
        f(x, 2.0, x)  # a hit
    assert (
        f._launch_cache.hits == 1 and len(seen) == before + 1 and seen[-1] is not None
    )


# ----------------------------------------------------------------- results


LAYOUTS = {
    "contiguous": lambda t: t,
    "transposed": lambda t: t.t(),
    "sliced": lambda t: t[:, ::2],
    "expanded": lambda t: t[:1].expand(t.shape[0], -1),
    "offset": lambda t: t[1:, 1:],
}
# (bfloat16 arithmetic with a scalar does not run on Triton's interpreter, cached or
# not: no get_bf16; bfloat16 is swept through copy_ below)
DTYPES = [torch.float32, torch.float16, torch.int32]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_bit_exact_against_the_uncached_path(layout, dtype):
    fns = FNS
    view = LAYOUTS[layout]
    scalar = 3 if dtype == torch.int32 else 0.5
    for seed in range(N + 2):  # counted, recorded, then two hits
        x, y = rand(6, 8, dtype=dtype, seed=seed), rand(6, 8, dtype=dtype, seed=9)
        got = fns.axpy(view(x), scalar, view(y)), fns.pair(view(x))
        want = uncached(
            lambda a, b: (fns.axpy(view(a), scalar, view(b)), fns.pair(view(a))), x, y
        )[0]
        assert same(got, want), (layout, dtype, seed)
    assert fns.axpy._launch_cache.hits == 2 and fns.pair._launch_cache.hits == 2


def test_output_aliasing_an_input():
    f = FNS.axpy

    def run(x, y):
        for _ in range(N + 2):  # in place, then a partial overlap of out with an input
            f(x, 2.0, y, out0=x)
            f(x[:-1], 0.5, y[1:], out0=x[1:])
        return x

    x, y = rand(5, 4), rand(5, 4, seed=1)
    want = uncached(run, x, y)[0]
    assert same(run(x, y), want)
    assert f._launch_cache.hits == 4


def test_zero_size_and_zero_dim():
    fns = FNS
    cases = [rand(0, 3), rand(3, 0).t(), torch.tensor(1.5, device=DEV), rand(1, 1)]
    for _ in range(N + 1):
        hits = fns.axpy._launch_cache.hits
        for x in cases:
            got = fns.axpy(x, 2.0, x), fns.pair(x)
            want = uncached(lambda a: (fns.axpy(a, 2.0, a), fns.pair(a)), x)[0]
            assert same(got, want)
    assert fns.axpy._launch_cache.hits == hits + len(cases)  # the last pass hits


def test_errors_as_before_with_nothing_written():
    f = FNS.axpy
    x = rand(4, 6)
    bad_outs = {
        "shape": torch.full((6, 4), 7.0, device=DEV),
        "internal overlap": torch.full((6,), 7.0, device=DEV).expand(4, 6),
    }
    for name, out in bad_outs.items():
        before = out.clone()
        with lc.enabled(False):
            with pytest.raises(Exception) as want:
                f(x, 2.0, x.t() if name == "shape" else x, out0=out)
        for _ in range(2):
            with pytest.raises(type(want.value)) as got:
                f(x, 2.0, x.t() if name == "shape" else x, out0=out)
            assert str(got.value) == str(want.value)
        assert torch.equal(out, before), name
    assert len(f._launch_cache.plans) == 0  # a failed call records nothing
    with pytest.raises(ValueError):
        f(x, x, x)  # a tensor where the schema has a scalar


def test_calls_it_cannot_key_stay_uncached():
    f = FNS.axpy
    x = rand(4, 6)
    wrapper = f.instantiate(2)
    buf = StridedBuffer(x)
    out = torch.empty(4, 6, device=DEV)
    odd = [
        lambda: wrapper(buf, 2.0, buf, out0=out),  # a StridedBuffer (flip's, say)
        lambda: f(x.to_sparse(), 2.0, x),  # sparse: no strides
        lambda: f(x, torch.tensor(2.0).numpy().item() * 1, x),  # a float: keyed
    ]
    for call in odd[:2]:
        with contextlib.suppress(Exception):
            call()
    assert not wrapper.launch_cache.plans and not f._launch_cache.plans
    for _ in range(N):
        odd[2]()
    assert len(f._launch_cache.plans) == 1


def test_a_call_that_launches_twice_is_not_cached():
    fns = FNS
    cache = lc.LaunchCache()
    both = lambda x: (fns.axpy(x, 2.0, x), fns.pair(x))  # noqa: E731
    x = rand(4, 6)
    for _ in range(4):
        got = cache(both, (x,), {})
    assert cache.plans and all(p is lc._UNCACHEABLE for p in cache.plans.values())
    assert same(got, uncached(both, x)[0]) and cache.hits == 0


def test_plans_are_bounded():
    f = FNS.axpy
    with mock.patch.object(lc, "MAX_PLANS", 4):
        for n in range(1, 7):
            for _ in range(N):  # counted, then recorded
                f(rand(n, 3), 2.0, rand(n, 3))
        assert len(f._launch_cache.plans) == 4
        misses = f._launch_cache.misses
        f(rand(1, 3), 2.0, rand(1, 3))  # the oldest plan (never hit) was dropped
        assert f._launch_cache.misses == misses + 1


def _recordings(cache):
    """A spy on lc._plan: how many calls were recorded (a plan built)."""
    return mock.patch.object(lc, "_plan", wraps=lc._plan)


def test_one_off_signatures_are_only_remembered():
    f = FNS.axpy
    with mock.patch.object(lc, "MAX_SEEN", 3), _recordings(f) as plan:
        for n in range(1, 9):
            x = rand(n, 2)
            assert same(f(x, 2.0, x), uncached(lambda a: f(a, 2.0, a), x)[0])
        assert plan.call_count == 0 and not f._launch_cache.plans
        assert 0 < len(f._launch_cache.seen) <= 3  # bounded (emptied when full)
        assert all(type(k) is int for k in f._launch_cache.seen)  # hashes, not keys


def test_signatures_of_one_hash_keep_their_own_plans():
    """With every key hashing alike, each plan is still found by its whole key."""
    f = FNS.axpy
    xs = [rand(n, 2, seed=n) for n in range(1, 5)]
    want = [uncached(lambda a: f(a, 2.0, a), x)[0] for x in xs]
    with mock.patch.object(lc, "hash", create=True, new=lambda key: 0):
        for _ in range(4):
            for x, w in zip(xs, want):
                assert same(f(x, 2.0, x), w)
        cache = f._launch_cache
        assert list(cache.seen) in ([], [0]) and cache.hits >= len(xs)
        assert len(cache.plans) >= 2  # plans of several signatures, one count


def test_recordings_that_are_never_hit_run_out_of_credit():
    """Recording stops once the credit is spent, and hits earn it back."""
    f = FNS.axpy
    xs = [rand(n, 2, seed=n) for n in range(1, 7)]
    want = [uncached(lambda a: f(a, 2.0, a), x)[0] for x in xs]
    credit = mock.patch.multiple(lc, RECORD_CREDIT=2, MISSES_PER_RECORDING=10**6)
    with credit, _recordings(f) as plan:
        for x, w in zip(xs, want):
            for _ in range(N):
                assert same(f(x, 2.0, x), w)
        assert plan.call_count == 2 and lc.stats()["recordings"] == 2
        assert f._launch_cache.hits == 0
        for _ in range(3):  # the first signature's plan: 3 hits, 3 more recordings
            assert same(f(xs[0], 2.0, xs[0]), want[0])
        assert f._launch_cache.hits == 3
        for x, w in zip(xs[2:], want[2:]):  # each was seen N times: recorded now
            assert same(f(x, 2.0, x), w)
        assert plan.call_count == 2 + 3
        assert same(f(xs[-1], 2.0, xs[-1]), want[-1])  # still seen, not recorded
        assert plan.call_count == 5 and len(f._launch_cache.plans) == 5


def test_without_hits_recording_goes_on_at_one_per_misses_per_recording():
    """With no credit and no hit, recording trickles at one per MISSES_PER_RECORDING."""
    f = FNS.axpy
    credit = mock.patch.multiple(lc, RECORD_CREDIT=0, MISSES_PER_RECORDING=4)
    with credit, _recordings(f) as plan:
        for n in range(1, 9):  # 8 signatures, N calls each
            x = rand(n, 2, seed=n)
            for _ in range(N):
                f(x, 2.0, x)
        misses = f._launch_cache.misses
        assert misses == 8 * N and f._launch_cache.hits == 0
        assert 4 <= plan.call_count <= misses // 4


def test_a_run_of_one_off_signatures_banks_no_recordings():
    """Misses fill the credit only up to RECORD_CREDIT (no burst after one-off runs)."""
    f = FNS.axpy
    credit = mock.patch.multiple(lc, RECORD_CREDIT=1, MISSES_PER_RECORDING=8)
    with credit, _recordings(f) as plan:
        for n in range(1, 101):
            x = rand(n, 3, seed=n)
            assert same(f(x, 2.0, x), uncached(lambda a: f(a, 2.0, a), x)[0])
        assert plan.call_count == 0 and f._launch_cache.misses == 100
        for n in range(1, 9):  # 8 signatures, N calls each, never called again
            x = rand(n, 5, seed=n)
            want = uncached(lambda a: f(a, 2.0, a), x)[0]
            for _ in range(N):
                assert same(f(x, 2.0, x), want)
        late = 8 * N  # the misses since the one-off run
        assert f._launch_cache.hits == 0 and f._launch_cache.misses == 100 + late
        # the credit's start (one) plus the trickle of the late misses; a credit that
        # banked the one-off run's misses would have recorded all 8
        assert 1 <= plan.call_count <= 1 + late // 8 < 8


def test_a_run_of_hits_banks_at_most_max_credit_recordings():
    """Hits fill the credit only up to MAX_CREDIT."""
    f = FNS.axpy
    credit = mock.patch.multiple(
        lc, RECORD_CREDIT=1, MAX_CREDIT=3, MISSES_PER_RECORDING=10**6
    )
    hot = rand(2, 2, seed=1)
    want = uncached(lambda a: f(a, 2.0, a), hot)[0]
    with credit, _recordings(f) as plan:
        for _ in range(N + 60):  # counted, recorded, then 60 hits
            assert same(f(hot, 2.0, hot), want)
        assert f._launch_cache.hits == 60 and plan.call_count == 1
        for n in range(3, 15):  # 12 signatures, N calls each, never called again
            x = rand(n, 2, seed=n)
            want = uncached(lambda a: f(a, 2.0, a), x)[0]
            for _ in range(N):
                assert same(f(x, 2.0, x), want)
        assert f._launch_cache.hits == 60
        assert plan.call_count == 1 + 3  # the hot one, then MAX_CREDIT


def test_a_round_robin_over_more_signatures_than_the_cap_keeps_its_plans():
    """The clock (not FIFO) keeps its plans and records nothing in steady state."""
    f = FNS.axpy
    xs = [rand(n, 2, seed=n) for n in range(1, 7)]
    want = [uncached(lambda a: f(a, 2.0, a), x)[0] for x in xs]
    with mock.patch.object(lc, "MAX_PLANS", 4), _recordings(f) as plan:
        for _ in range(N + 1):  # warm-up cycles
            for x in xs:
                f(x, 2.0, x)
        hits, recorded = f._launch_cache.hits, plan.call_count
        for _ in range(3):
            for x, w in zip(xs, want):
                assert same(f(x, 2.0, x), w)
        assert f._launch_cache.hits - hits == 3 * 4  # the 4 plans held hit each cycle
        assert plan.call_count == recorded  # and nothing more was recorded


def test_stale_plans_give_way_to_new_signatures():
    f = FNS.axpy
    old = [rand(n, 2) for n in range(1, 5)]
    new = [rand(n, 3) for n in range(1, 5)]
    with mock.patch.object(lc, "MAX_PLANS", 4):
        for _ in range(N + 1):
            for x in old:
                f(x, 2.0, x)
        for _ in range(N + 3):
            for x in new:
                f(x, 2.0, x)
        hits = f._launch_cache.hits
        for x in new:
            f(x, 2.0, x)
        assert f._launch_cache.hits == hits + len(new)


def test_a_call_that_writes_without_a_recorded_launch_is_not_cached():
    """A wrapper without recorded_launch records no launch: nothing is cached."""
    cache = lc.LaunchCache()
    outs = [cache(lambda a: a + 1, (rand(4, 6, seed=k),), {}) for k in range(4)]
    for k, out in enumerate(outs):
        assert torch.equal(out, rand(4, 6, seed=k) + 1)
    assert cache.hits == 0 and all(p is lc._UNCACHEABLE for p in cache.plans.values())


def test_wrapper_files_are_named_by_their_source():
    """A wrapper file's name holds its source's hash (shared code caches)."""
    import hashlib
    from pathlib import Path

    wrapper = FNS.axpy.instantiate(3)
    path = Path(inspect.getsourcefile(wrapper.__wrapped__))
    digest = hashlib.sha256(path.read_text().encode()).hexdigest()[:16]
    assert path.stem.endswith("_" + digest) and "recorded_launch" in path.read_text()
    assert lc.source_named("d/a.py", "x") != lc.source_named("d/a.py", "y")
    assert lc.source_named("d/a.py", "x").startswith("d/a_")


def test_stats_and_clear_while_another_thread_makes_a_cache():
    """A cache made by another thread while stats() or clear() walks them."""
    import weakref

    held, made = [lc.LaunchCache()], []

    class Walked(weakref.WeakSet):
        def __iter__(self):
            for i, item in enumerate(super().__iter__()):
                if i == 0:  # another thread's first call, now
                    t = threading.Thread(target=lambda: made.append(lc.LaunchCache()))
                    t.start()
                    t.join(0.2)  # (blocked on the registry's lock, if it has one)
                    threads.append(t)
                yield item

    for walk in (lc.stats, lc.clear):
        threads = []
        registry = Walked(lc._CACHES)
        with mock.patch.object(lc, "_CACHES", registry):
            walk()
            for t in threads:
                t.join()
            assert len(made) == len(threads) == 1 and made[0] in registry
        made.clear()
    assert held


@pytest.mark.parametrize(
    "version, convention",
    [
        ("3.0.0", ("CompiledKernel", False)),
        ("3.0.0+a48aedef", ("CompiledKernel", False)),
        ("3.1.0", None),  # not proven: the cpu emulation does not start there
        ("3.2.0", ("CompiledKernel", False)),
        ("3.3.1", ("CompiledKernel", True)),
        ("3.4.0", ("knobs", True)),
        ("3.6.0", ("knobs", True)),
        ("3.6.0+xpu", ("knobs", True)),
        ("2.3.1", None),
        ("3.7.0", None),
        ("unknown", None),
    ],
)
def test_launcher_convention_by_version(version, convention):
    assert lc._launcher_convention(version) == convention


def test_the_launcher_convention_is_this_tritons():
    """The cache launches as this Triton's JITFunction.run does."""
    assert lc._ABI_KNOWN and lc.is_enabled()
    assert lc._CONSTEXPRS_PASSED == emulation.interpreter.constexprs_in_launch()


def test_threads_share_plans_without_torn_entries():
    fns = FNS
    inputs = [rand(n, 5, seed=n) for n in (2, 3, 4, 5)]
    want = [uncached(lambda a: fns.axpy(a, 2.0, a), x)[0] for x in inputs]
    errors = []
    barrier = threading.Barrier(6)

    def work(k):
        barrier.wait()
        for i in range(12):
            j = (i + k) % len(inputs)
            if not same(fns.axpy(inputs[j], 2.0, inputs[j]), want[j]):
                errors.append((k, i))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    plans = fns.axpy._launch_cache.plans
    assert len(plans) == len(inputs)
    for plan in plans.values():
        assert plan.kernel is not None and len(plan.grid) == 3 and plan.outs


def test_a_count_cleared_before_its_admission_still_records():
    """Counts cleared between a signature's count and its admission: still recorded."""
    f = FNS.axpy
    x = rand(3, 4)
    want = uncached(lambda a: f(a, 2.0, a), x)[0]
    credit = lc.LaunchCache._credit

    def cleared_meanwhile(self):
        self.seen.clear()
        return credit(self)

    with mock.patch.object(lc.LaunchCache, "_credit", cleared_meanwhile):
        with _recordings(f) as plan:
            for _ in range(N + 1):  # counted, recorded, hit
                assert same(f(x, 2.0, x), want)
    assert plan.call_count == 1 and f._launch_cache.hits == 1


def test_threads_count_signatures_while_another_clears():
    """Unlocked counting while another thread clears: uncached results, bounded counts."""
    f = FNS.axpy
    inputs = [rand(n, 3, seed=n) for n in range(1, 9)]
    want = [uncached(lambda a: f(a, 2.0, a), x)[0] for x in inputs]
    errors, done = [], threading.Event()
    barrier = threading.Barrier(5)

    def work(k):
        barrier.wait()
        try:
            for i in range(40):
                j = (i * (k + 1)) % len(inputs)
                if not same(f(inputs[j], 2.0, inputs[j]), want[j]):
                    errors.append((k, i))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    def clearing():
        barrier.wait()
        while not done.is_set():
            lc.clear()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with mock.patch.object(lc, "MAX_SEEN", 3):
            threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
            cleaner = threading.Thread(target=clearing)
            for t in (*threads, cleaner):
                t.start()
            for t in threads:
                t.join()
            done.set()
            cleaner.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors
    assert len(f._launch_cache.seen) <= 3


def test_the_switch():
    f = FNS.axpy
    x = rand(4, 6)
    with lc.enabled(False):
        for _ in range(3):
            f(x, 2.0, x)
        assert not f._launch_cache.plans and not lc.is_enabled()
    warm(f, x, 2.0, x)
    assert len(f._launch_cache.plans) == 1 and lc.is_enabled()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32], ids=str)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_generic_copy_hits(layout, dtype):
    """The generic copy_ hits after the recording, bit for bit the uncached copy_."""
    copy_ = sys.modules["flag_gems.ops.copy"].copy_
    view = LAYOUTS[layout]
    dst = torch.empty_like(view(rand(6, 8, dtype=dtype)))
    for seed in range(N + 2):
        src = view(rand(6, 8, dtype=dtype, seed=seed))
        hits = lc.stats()["hits"]
        copy_(dst, src)
        assert (lc.stats()["hits"] == hits + 1) == (seed >= N), seed
        with lc.enabled(False):
            want = copy_(torch.empty_like(dst), src)
        assert same(dst, want) and torch.equal(dst.cpu(), src.cpu())


def test_kunlunxin_pointwise_dynamic_is_untouched():
    """The KunlunXIN pointwise_dynamic fork has no cache and launches as it did."""
    kx = sys.modules["_kunlunxin.utils.pointwise_dynamic"]
    f = _make(kx.pointwise_dynamic).axpy
    x = rand(4, 6)
    assert not hasattr(f, "_launch_cache")
    for _ in range(N + 1):
        assert same(f(x, 2.0, x), uncached(lambda a: f(a, 2.0, a), x)[0])
    assert lc.stats()["hits"] == 0


def test_a_launcher_that_refuses_the_arguments_falls_back():
    """A launcher raising TypeError: the plain launch, bit-exact, and it stays there."""
    f = FNS.axpy
    x = rand(4, 6)
    want = uncached(lambda a: f(a, 2.0, a), x)[0]
    warm(f, x, 2.0, x)
    (plan,) = f._launch_cache.plans.values()

    def refuse(*args):
        raise TypeError("function takes exactly 17 arguments (16 given)")

    plan.launcher = refuse
    hits = f._launch_cache.hits
    assert same(f(x, 2.0, x), want)
    assert list(f._launch_cache.plans.values()) == [lc._UNCACHEABLE]
    assert same(f(x, 2.0, x), want) and f._launch_cache.hits == hits


def test_what_the_key_leaves_out_does_not_change_the_launch():
    """Negated views and requires_grad are not in the key: a hit gives the same bits."""
    f = FNS.axpy
    x = rand(4, 6)
    variants = [x, x._neg_view(), rand(4, 6, seed=5).requires_grad_(), x.t().t()]
    variants = [*[x] * (N - 1), *variants]  # counted first, then recorded: x itself
    for v in variants:  # one signature: counted, recorded, then hits
        got = f(v, 2.0, v)
        with lc.enabled(False):  # (on v itself: a clone would resolve the negation)
            want = f(v, 2.0, v)
        assert same(got, want)
        assert not got.is_neg() and not got.requires_grad
    assert f._launch_cache.hits == len(variants) - N


def test_named_tensors_stay_uncached():
    """Named tensors (torch < 2.13, stood in for) cannot be keyed."""
    x = rand(4, 6)
    assert lc._key((x,), {}, ()) is not None
    with (
        mock.patch.object(lc, "_HAS_NAMES", True),
        mock.patch.object(torch.Tensor, "has_names", lambda self: True, create=True),
    ):
        assert lc._key((x,), {}, ()) is None
        f = FNS.axpy
        warm(f, x, 2.0, x)
        assert not f._launch_cache.plans and not f._launch_cache.seen


def test_a_misaligned_allocation_takes_the_uncached_path():
    """An allocated output's alignment is checked at each hit."""
    f = FNS.axpy
    x = rand(4, 6)
    warm(f, x, 2.0, x)
    stock = torch.empty_strided

    def misaligned(shape, stride, **kwargs):  # 4 bytes past a 16-byte boundary
        flat = stock((x.numel() + 1,), (1,), **kwargs)
        return flat[1:].as_strided(shape, stride)

    with mock.patch.object(torch, "empty_strided", misaligned):
        hits = f._launch_cache.hits
        got = f(x, 2.0, x)
    assert f._launch_cache.hits == hits and got.data_ptr() % 16 == 0
    assert same(got, uncached(lambda a: f(a, 2.0, a), x)[0])


def test_the_block_pointer_setting_is_in_the_key():
    """pointwise_dynamic's salt: prefer_block_pointer picks another overload."""
    f = FNS.axpy
    x = rand(4, 6)
    warm(f, x, 2.0, x)
    stock = f.config.prefer_block_pointer
    try:
        f.config.prefer_block_pointer = not stock
        misses = f._launch_cache.misses
        got = f(x, 2.0, x)
        assert f._launch_cache.misses == misses + 1
    finally:
        f.config.prefer_block_pointer = stock
    assert same(got, uncached(lambda a: f(a, 2.0, a), x)[0])
