"""PR 7's launch cache: hits, key misses, threads, credit, fallbacks, bit-exactness."""

import contextlib
import hashlib
import inspect
import sys
import threading
import types
import weakref
from pathlib import Path
from unittest import mock

import pytest

from copyfix import emulation

MODE = emulation.activate()  # before flag_gems is imported

import torch  # noqa: E402
import triton  # noqa: E402

import flag_gems.ops.copy  # noqa: E402,F401  (the generic copy_, PR 5)
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
F, CACHE = FNS.axpy, FNS.axpy._launch_cache  # (lc.clear empties the cache in place)
# calls of a signature until one is recorded: ADMIT_AFTER uncached ones, then that one
N = lc.ADMIT_AFTER + 1


def rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).to(DEV)


def uncached(call, *tensors):
    clones = [t.clone() for t in tensors]
    with lc.enabled(False):
        return call(*clones), clones


def axpy(x, f=F):
    return f(x, 2.0, x)


def ref(x, f=F):
    return uncached(lambda a: axpy(a, f), x)[0]


def check(x, times=N, f=F):
    want = ref(x, f)
    for _ in range(times):
        assert same(axpy(x, f), want)


def same(a, b):
    if isinstance(a, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    layout = a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
    bits = lambda t: t.cpu().contiguous().view(-1).view(torch.uint8)  # noqa: E731
    return layout and (a.numel() == 0 or torch.equal(bits(a), bits(b)))


def counts(cache=CACHE):
    return cache.hits, cache.misses


def warm(x):
    for _ in range(N):
        axpy(x)


@contextlib.contextmanager
def _recordings(**limits):
    """A spy on lc._plan (called once per recording), under lc's ``limits``."""
    with mock.patch.multiple(lc, **limits) if limits else contextlib.nullcontext():
        with mock.patch.object(lc, "_plan", wraps=lc._plan) as plan:
            yield plan


@pytest.fixture(autouse=True)
def fresh_plans():
    with lc.enabled(True):
        lc.clear()
        yield


def test_first_calls_are_the_uncached_path_and_a_hit_skips_it():
    x, y = rand(4, 6), rand(4, 6, seed=1)
    with (
        mock.patch.object(F, "prepare_args", wraps=F.prepare_args) as prepare,
        mock.patch.object(
            LibEntry, "run", autospec=True, side_effect=LibEntry.run
        ) as entry,
    ):
        for k in range(1, N):  # counted only
            zeroth = F(x, 2.0, y)
            assert prepare.call_count == k and entry.call_count == k
            assert counts() == (0, k) and not CACHE.plans
        first = F(x, 2.0, y)  # recorded
        assert prepare.call_count == N and entry.call_count == N
        assert counts() == (0, N) and len(CACHE.plans) == 1
        (plan,) = CACHE.plans.values()
        x2, y2 = rand(4, 6, seed=2), rand(4, 6, seed=3)
        with mock.patch.object(plan, "launcher", wraps=plan.launcher) as launcher:
            second = F(x2, 3.0, y2)
        assert prepare.call_count == N and entry.call_count == N  # derivations skipped
        assert launcher.call_count == 1  # the recorded kernel, once
        assert launcher.call_args.args[4] is plan.kernel.function
        assert counts() == (1, N)
    assert same(zeroth, uncached(lambda a, b: F(a, 2.0, b), x, y)[0])
    assert same(first, zeroth)
    assert same(second, uncached(lambda a, b: F(a, 3.0, b), x2, y2)[0])


def test_instantiated_wrapper_hits_too():
    """Callers that instantiate a wrapper themselves (copy_) get the cache as well."""
    x, y, out = rand(3, 5), rand(3, 5, seed=1), torch.empty(5, 3, device=DEV).t()
    wrapper = F.instantiate(2)
    for _ in range(N):  # counted, then recorded
        assert wrapper(x, 2.0, y, out0=out) is out
    want = uncached(lambda a, b, o: wrapper(a, 2.0, b, out0=o), x, y, out)[1][2]
    assert same(out, want)
    out.zero_()
    assert wrapper(x, 2.0, y, out0=out) is out
    assert counts(wrapper.launch_cache) == (1, N) and same(out, want)


def test_one_cache_per_call():
    """A call through pointwise_dynamic is keyed once: the inner wrapper's cache idles."""
    x = rand(4, 6)
    with mock.patch.object(lc, "_key", wraps=lc._key) as key:
        for _ in range(N + 1):  # counted, recorded, a hit
            axpy(x)
    assert key.call_count == N + 1
    inner = F.instantiate(2).launch_cache
    assert (inner.hits, inner.misses, inner.seen, inner.plans) == (0, 0, {}, {})
    assert CACHE.hits == 1


def _float64(call, *args):
    torch.set_default_dtype(torch.float64)
    try:
        return call(*args)
    finally:
        torch.set_default_dtype(torch.float32)


def _signature_pairs():
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
            lambda f: _float64(f32, f, x.int(), 2.5),
        ),
    }


PAIRS = sorted(_signature_pairs())


def _scenario(field):
    a, b = _signature_pairs()[field]
    for _ in range(N + 1):  # recorded, then a hit of A's plan
        a(F)
    misses = CACHE.misses
    got = b(F)
    with lc.enabled(False):
        want = b(F)
    return CACHE.misses == misses + 1 and same(got, want)


def _dropping(field):
    stock_key = lc._key
    tensor_field = {"dtype": 0, "shape": 1, "stride": 2, "broadcast": 1, "alignment": 4}
    int_field = {"int_class": 3, "int_is_one": 1, "int_div16": 2}

    def part(d):
        scalar_int = isinstance(d, tuple) and d and d[0] is int
        if field == "scalar_type" and (d is float or scalar_int):
            return "scalar"
        tensor = isinstance(d, tuple) and d and isinstance(d[0], torch.dtype)
        fields = int_field if scalar_int else tensor_field if tensor else {}
        i = fields.get(field)
        return d if i is None else d[:i] + d[i + 1 :]

    def key(args, kwargs, salt):
        k = stock_key(args, kwargs, salt)
        if k is None:
            return k
        if field == "out_given":
            return k[: 1 + len(args)]  # (salt, args): which outputs are given left out
        if field == "default_dtype":
            return ((k[0][0],), *k[1:])  # the salt without the default dtype
        return (k[0], *map(part, k[1:]))

    return mock.patch.object(lc, "_key", key)


@pytest.mark.parametrize("field", PAIRS)
def test_a_change_of_any_key_field_misses_and_dropping_it_is_caught(field):
    """The scenario holds, and fails when the key leaves that field out."""
    assert _scenario(field)
    lc.clear()
    with _dropping(field):
        try:
            caught = not _scenario(field)
        except Exception:  # a stale plan launched with the wrong arguments
            caught = True
    assert caught


def test_key_holds_the_device_of_each_tensor():
    x = rand(2, 3)
    key = lc._key((x,), {}, ())
    with mock.patch.object(torch.Tensor, "get_device", lambda self: 7):  # cpu: one
        other = lc._key((x,), {}, ())
    assert key[1][3] == x.get_device() and other[1][3] == 7
    assert other[1][:3] + other[1][4:] == key[1][:3] + key[1][4:]


def test_current_device_and_stream_are_read_at_each_launch():
    x = rand(4, 6)
    warm(x)
    driver = triton.runtime.driver.active
    with mock.patch.object(
        driver, "get_current_stream", wraps=driver.get_current_stream
    ) as stream:
        axpy(x)
        axpy(x)
    assert stream.call_count == 2  # one read per hit
    (plan,) = CACHE.plans.values()
    stock_device = driver.get_current_device
    answers = iter([plan.device + 1])  # the cache's read sees another device current
    device = lambda: next(answers, stock_device())  # noqa: E731
    with mock.patch.object(driver, "get_current_device", side_effect=device):
        hits = CACHE.hits
        got = axpy(x)  # the uncached path, with its device guard
        assert CACHE.hits == hits
    assert same(got, ref(x))


@contextlib.contextmanager
def _enter_hook(hook):
    holder = emulation.interpreter.hook_holder()
    chain = holder.launch_enter_hook
    with contextlib.ExitStack() as stack:
        if hasattr(chain, "add"):  # a HookChain
            chain.add(hook)
            stack.callback(chain.remove, hook)
        else:
            stack.enter_context(mock.patch.object(holder, "launch_enter_hook", hook))
        yield


def test_launch_hooks_see_every_launch():
    x = rand(4, 6)
    seen = []
    with _enter_hook(lambda meta: seen.append(meta)):
        warm(x)
        # (how many uncached launches the hook sees depends on Triton; the hit counts)
        assert seen
        before = len(seen)
        axpy(x)  # a hit
    assert CACHE.hits == 1 and len(seen) == before + 1 and seen[-1] is not None


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
    view = LAYOUTS[layout]
    scalar = 3 if dtype == torch.int32 else 0.5
    both = lambda a, b: (F(view(a), scalar, view(b)), FNS.pair(view(a)))  # noqa: E731
    for seed in range(N + 2):  # counted, recorded, then two hits
        x, y = rand(6, 8, dtype=dtype, seed=seed), rand(6, 8, dtype=dtype, seed=9)
        assert same(both(x, y), uncached(both, x, y)[0]), (layout, dtype, seed)
    assert CACHE.hits == 2 and FNS.pair._launch_cache.hits == 2


def test_output_aliasing_an_input():
    def run(x, y):
        for _ in range(N + 2):  # in place, then a partial overlap of out with an input
            F(x, 2.0, y, out0=x)
            F(x[:-1], 0.5, y[1:], out0=x[1:])
        return x

    x, y = rand(5, 4), rand(5, 4, seed=1)
    want = uncached(run, x, y)[0]
    assert same(run(x, y), want)
    assert CACHE.hits == 4


def test_zero_size_and_zero_dim():
    cases = [rand(0, 3), rand(3, 0).t(), torch.tensor(1.5, device=DEV), rand(1, 1)]
    both = lambda a: (axpy(a), FNS.pair(a))  # noqa: E731
    for _ in range(N + 1):
        hits = CACHE.hits
        for x in cases:
            assert same(both(x), uncached(both, x)[0])
    assert CACHE.hits == hits + len(cases)  # the last pass hits


def test_errors_as_before_with_nothing_written():
    x = rand(4, 6)
    bad_outs = {
        "shape": torch.full((6, 4), 7.0, device=DEV),
        "internal overlap": torch.full((6,), 7.0, device=DEV).expand(4, 6),
    }
    for name, out in bad_outs.items():
        before = out.clone()
        call = lambda: F(x, 2.0, x.t() if name == "shape" else x, out0=out)  # noqa: E731
        with lc.enabled(False), pytest.raises(Exception) as want:
            call()
        for _ in range(2):
            with pytest.raises(type(want.value)) as got:
                call()
            assert str(got.value) == str(want.value)
        assert torch.equal(out, before), name
    assert len(CACHE.plans) == 0  # a failed call records nothing
    with pytest.raises(ValueError):
        F(x, x, x)  # a tensor where the schema has a scalar


def test_calls_it_cannot_key_stay_uncached():
    x = rand(4, 6)
    wrapper = F.instantiate(2)
    buf = StridedBuffer(x)
    out = torch.empty(4, 6, device=DEV)
    with contextlib.suppress(Exception):
        wrapper(buf, 2.0, buf, out0=out)  # a StridedBuffer (flip's, say)
    with contextlib.suppress(Exception):
        F(x.to_sparse(), 2.0, x)  # sparse: no strides
    with (
        mock.patch.object(lc, "_HAS_NAMES", True),  # named tensors (torch < 2.13)
        mock.patch.object(torch.Tensor, "has_names", lambda self: True, create=True),
    ):
        assert lc._key((x,), {}, ()) is None
        warm(x)
    assert not wrapper.launch_cache.plans and not CACHE.plans and not CACHE.seen
    for _ in range(N):
        F(x, torch.tensor(2.0).numpy().item() * 1, x)  # a float: keyed
    assert len(CACHE.plans) == 1


@pytest.mark.parametrize("calls", ["twice", "no recorded_launch"])
def test_a_call_without_one_recorded_launch_is_not_cached(calls):
    cache = lc.LaunchCache()
    if calls == "twice":
        fn, xs = lambda x: (axpy(x), FNS.pair(x)), [rand(4, 6)] * 4
    else:
        fn, xs = lambda a: a + 1, [rand(4, 6, seed=k) for k in range(4)]
    for x in xs:
        assert same(cache(fn, (x,), {}), uncached(fn, x)[0])
    assert cache.plans and all(p is lc._UNCACHEABLE for p in cache.plans.values())
    assert cache.hits == 0


def test_signatures_of_one_hash_keep_their_own_plans():
    xs = [rand(n, 2, seed=n) for n in range(1, 5)]
    want = [ref(x) for x in xs]
    with mock.patch.object(lc, "hash", create=True, new=lambda key: 0):
        for _ in range(4):
            for x, w in zip(xs, want):
                assert same(axpy(x), w)
        assert list(CACHE.seen) in ([], [0]) and CACHE.hits >= len(xs)
        assert len(CACHE.plans) >= 2  # plans of several signatures, one count


def test_recordings_that_are_never_hit_run_out_of_credit():
    """Recording stops once the credit is spent, and hits earn it back."""
    xs = [rand(n, 2, seed=n) for n in range(1, 7)]
    want = [ref(x) for x in xs]
    with _recordings(RECORD_CREDIT=2, MISSES_PER_RECORDING=10**6) as plan:
        for x, w in zip(xs, want):
            for _ in range(N):
                assert same(axpy(x), w)
        assert plan.call_count == 2 and lc.stats()["recordings"] == 2
        assert CACHE.hits == 0
        for _ in range(3):  # the first signature's plan: 3 hits, 3 more recordings
            assert same(axpy(xs[0]), want[0])
        assert CACHE.hits == 3
        for x, w in zip(xs[2:], want[2:]):  # each was seen N times: recorded now
            assert same(axpy(x), w)
        assert plan.call_count == 2 + 3
        assert same(axpy(xs[-1]), want[-1])  # still seen, not recorded
        assert plan.call_count == 5 and len(CACHE.plans) == 5


def test_without_hits_recording_goes_on_at_one_per_misses_per_recording():
    with _recordings(RECORD_CREDIT=0, MISSES_PER_RECORDING=4) as plan:
        for n in range(1, 9):  # 8 signatures, N calls each
            warm(rand(n, 2, seed=n))
        assert CACHE.misses == 8 * N and CACHE.hits == 0
        assert 4 <= plan.call_count <= CACHE.misses // 4


def test_a_run_of_one_off_signatures_banks_no_recordings():
    """One-offs are only counted (in a bounded set); credit stops at RECORD_CREDIT."""
    with _recordings(RECORD_CREDIT=1, MISSES_PER_RECORDING=8) as plan:
        with mock.patch.object(lc, "MAX_SEEN", 3):
            for n in range(1, 101):
                check(rand(n, 3, seed=n), 1)
            assert 0 < len(CACHE.seen) <= 3  # bounded (emptied when full)
            assert all(type(k) is int for k in CACHE.seen)  # hashes, not keys
        assert plan.call_count == 0 and not CACHE.plans and CACHE.misses == 100
        for n in range(1, 9):  # 8 signatures, N calls each, never called again
            check(rand(n, 5, seed=n))
        late = 8 * N  # the misses since the one-off run
        assert CACHE.hits == 0 and CACHE.misses == 100 + late
        # the credit's start (one) plus the trickle of the late misses; a credit that
        # banked the one-off run's misses would have recorded all 8
        assert 1 <= plan.call_count <= 1 + late // 8 < 8


def test_a_run_of_hits_banks_at_most_max_credit_recordings():
    limits = dict(RECORD_CREDIT=1, MAX_CREDIT=3, MISSES_PER_RECORDING=10**6)
    with _recordings(**limits) as plan:
        check(rand(2, 2, seed=1), N + 60)  # counted, recorded, then 60 hits
        assert CACHE.hits == 60 and plan.call_count == 1
        for n in range(3, 15):  # 12 signatures, N calls each, never called again
            check(rand(n, 2, seed=n))
        assert CACHE.hits == 60
        assert plan.call_count == 1 + 3  # the hot one, then MAX_CREDIT


def test_a_round_robin_over_more_signatures_than_the_cap_keeps_its_plans():
    """The clock (not FIFO) keeps 4 plans, records nothing steady, lets stale ones go."""
    xs = [rand(n, 2, seed=n) for n in range(1, 7)]
    want = [ref(x) for x in xs]
    with _recordings(MAX_PLANS=4) as plan:
        for _ in range(N + 1):  # warm-up cycles
            for x in xs:
                axpy(x)
        hits, recorded = CACHE.hits, plan.call_count
        for _ in range(3):
            for x, w in zip(xs, want):
                assert same(axpy(x), w)
        assert CACHE.hits - hits == 3 * 4 == 3 * len(CACHE.plans)  # 4 held, hit
        assert plan.call_count == recorded  # and nothing more was recorded
        new = [rand(n, 3) for n in range(1, 5)]  # stale plans give way to these
        for _ in range(N + 3):
            for x in new:
                axpy(x)
        hits = CACHE.hits
        for x in new:
            axpy(x)
        assert CACHE.hits == hits + len(new)


def test_a_count_cleared_before_its_admission_still_records():
    credit = lc.LaunchCache._credit

    def cleared_meanwhile(self):
        self.seen.clear()
        return credit(self)

    with mock.patch.object(lc.LaunchCache, "_credit", cleared_meanwhile):
        with _recordings() as plan:
            check(rand(3, 4), N + 1)  # counted, recorded, hit
    assert plan.call_count == 1 and CACHE.hits == 1


def test_wrapper_files_are_named_by_their_source():
    """A wrapper file's name holds its source's hash (shared code caches)."""
    wrapper = F.instantiate(3)
    path = Path(inspect.getsourcefile(wrapper.__wrapped__))
    digest = hashlib.sha256(path.read_text().encode()).hexdigest()[:16]
    assert path.stem.endswith("_" + digest) and "recorded_launch" in path.read_text()
    assert lc.source_named("d/a.py", "x") != lc.source_named("d/a.py", "y")
    assert lc.source_named("d/a.py", "x").startswith("d/a_")


def test_stats_and_clear_while_another_thread_makes_a_cache():
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


OLD, CK, KNOBS = ("CompiledKernel", False), ("CompiledKernel", True), ("knobs", True)
CONVENTIONS = {
    "3.0.0": OLD, "3.0.0+a48aedef": OLD, "3.2.0": OLD, "3.3.1": CK, "3.4.0": KNOBS,
    "3.6.0": KNOBS, "3.6.0+xpu": KNOBS, "2.3.1": None, "3.7.0": None, "unknown": None,
    "3.1.0": None,  # not proven: the cpu emulation does not start there
}  # fmt: skip


@pytest.mark.parametrize("version, convention", CONVENTIONS.items())
def test_launcher_convention_by_version(version, convention):
    assert lc._launcher_convention(version) == convention


def test_the_launcher_convention_is_this_tritons():
    """The cache launches as this Triton's JITFunction.run does."""
    assert lc._ABI_KNOWN and lc.is_enabled()
    assert lc._CONSTEXPRS_PASSED == emulation.interpreter.constexprs_in_launch()


def _hammer(inputs, threads, calls, pick):
    """``threads`` threads calling axpy on ``inputs[pick(k, i)]``: their mismatches."""
    want = [ref(x) for x in inputs]
    errors, barrier = [], threading.Barrier(threads)

    def work(k):
        barrier.wait()
        try:
            for i in range(calls):
                j = pick(k, i) % len(inputs)
                if not same(axpy(inputs[j]), want[j]):
                    errors.append((k, i))
        except Exception as e:  # noqa: BLE001 (reported by the caller)
            errors.append(e)

    workers = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return errors


def test_threads_share_plans_without_torn_entries():
    inputs = [rand(n, 5, seed=n) for n in (2, 3, 4, 5)]
    assert not _hammer(inputs, 6, 12, lambda k, i: i + k)
    assert len(CACHE.plans) == len(inputs)
    for plan in CACHE.plans.values():
        assert plan.kernel is not None and len(plan.grid) == 3 and plan.outs


def test_threads_count_signatures_while_another_clears():
    """Unlocked counting while another thread clears: uncached results, bounded counts."""
    inputs = [rand(n, 3, seed=n) for n in range(1, 9)]
    done = threading.Event()

    def clearing():
        while not done.is_set():
            lc.clear()

    cleaner, interval = threading.Thread(target=clearing), sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with mock.patch.object(lc, "MAX_SEEN", 3):
            cleaner.start()
            errors = _hammer(inputs, 4, 40, lambda k, i: i * (k + 1))
    finally:
        done.set()
        cleaner.join()
        sys.setswitchinterval(interval)
    assert not errors
    assert len(CACHE.seen) <= 3


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32], ids=str)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_generic_copy_hits(layout, dtype):
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
    kx = sys.modules["_kunlunxin.utils.pointwise_dynamic"]
    f = _make(kx.pointwise_dynamic).axpy
    x = rand(4, 6)
    assert not hasattr(f, "_launch_cache")
    check(x, N + 1, f)
    assert lc.stats()["hits"] == 0


def test_what_the_key_leaves_out_does_not_change_the_launch():
    """Negated views and requires_grad are not in the key: a hit gives the same bits."""
    x = rand(4, 6)
    variants = [x, x._neg_view(), rand(4, 6, seed=5).requires_grad_(), x.t().t()]
    variants = [*[x] * (N - 1), *variants]  # counted first, then recorded: x itself
    for v in variants:  # one signature: counted, recorded, then hits
        got = axpy(v)
        with lc.enabled(False):  # (on v itself: a clone would resolve the negation)
            want = axpy(v)
        assert same(got, want)
        assert not got.is_neg() and not got.requires_grad
    assert CACHE.hits == len(variants) - N


def _misaligned(x):
    stock = torch.empty_strided

    def misaligned(shape, stride, **kwargs):  # 4 bytes past a 16-byte boundary
        return stock((x.numel() + 1,), (1,), **kwargs)[1:].as_strided(shape, stride)

    return mock.patch.object(torch, "empty_strided", misaligned)


REFUSE = TypeError("function takes exactly 17 arguments (16 given)")
UNFIT = {  # a recorded plan that does not fit the next calls of its signature
    "launcher refuses": lambda x: mock.patch.object(
        [*CACHE.plans.values()][0], "launcher", mock.Mock(side_effect=REFUSE)
    ),
    "misaligned output": _misaligned,
    "block pointer flipped": lambda x: mock.patch.object(
        F.config, "prefer_block_pointer", not F.config.prefer_block_pointer
    ),
}


@pytest.mark.parametrize("unfit", sorted(UNFIT))
def test_a_plan_that_does_not_fit_takes_the_uncached_path(unfit):
    x = rand(4, 6)
    want = ref(x)
    warm(x)
    hits, misses = counts()
    with UNFIT[unfit](x):
        for _ in range(2):
            got = axpy(x)
            assert same(got, want) and got.data_ptr() % 16 == 0
    assert CACHE.hits == hits
    if unfit == "launcher refuses":
        assert list(CACHE.plans.values()) == [lc._UNCACHEABLE]
    if unfit == "block pointer flipped":
        assert CACHE.misses == misses + 2
