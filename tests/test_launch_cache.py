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

# pointwise_dynamic's per-signature launch cache (flag_gems/utils/launch_cache.py),
# opt-in: off unless FLAGGEMS_LAUNCH_CACHE=1.  These tests turn it on for their own
# scope.  A call that hits launches the kernel its signature recorded, so its result
# must be bit for bit the result of the uncached path, whatever the layout, and a call
# whose signature differs in one thing must miss.

import importlib.util
import os
import threading
from unittest import mock

import pytest
import torch
import triton

import flag_gems
from flag_gems.utils import launch_cache
from flag_gems.utils.pointwise_dynamic import pointwise_dynamic

from . import accuracy_utils as utils

DEVICE = flag_gems.device
# calls of a signature until one is recorded (the earlier ones run uncached)
CALLS = launch_cache.ADMIT_AFTER + 1


@triton.jit
def _axpy(x, a, y):
    return x * a + y


axpy = pointwise_dynamic(
    is_tensor=[True, False, True], promotion_methods=[(0, 1, 2, "DEFAULT")]
)(_axpy)


@pytest.fixture(autouse=True)
def cache_on():
    with launch_cache.enabled(True):
        if not launch_cache.is_enabled():
            pytest.skip("the launch cache does not know this Triton's launcher")
        launch_cache.clear()
        yield


def _uncached(fn, *args, **kwargs):
    with launch_cache.enabled(False):
        return fn(*args, **kwargs)


def _call(fn, *args, **kwargs):
    """(the result of one call of ``axpy``, whether that call hit a plan)"""
    hits = axpy._launch_cache.hits
    res = fn(*args, **kwargs)
    return res, axpy._launch_cache.hits == hits + 1


def _assert_same(res, ref):
    # both results are on the device: compared there, bit for bit
    assert res.dtype == ref.dtype and res.shape == ref.shape
    assert res.stride() == ref.stride()
    assert torch.equal(res, ref)


def test_launch_cache_off_unless_env_set():
    spec = importlib.util.find_spec(launch_cache.__name__)
    for env, on in ((None, False), ("0", False), ("1", True)):
        environ = {k: v for k, v in os.environ.items() if k != "FLAGGEMS_LAUNCH_CACHE"}
        if env is not None:
            environ["FLAGGEMS_LAUNCH_CACHE"] = env
        with mock.patch.dict(os.environ, environ, clear=True):
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)  # a fresh copy, reading the env
        assert module.is_enabled() is on, env


LAYOUTS = {
    "contiguous": lambda t: t,
    "transpose": lambda t: t.t(),
    "step_slice": lambda t: t[::2, 1::3],
    "expand": lambda t: t[:1].expand(t.shape[0], -1),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("scalar", [2.5, 3, 1, 32])
def test_launch_cache_hit_matches_uncached(layout, scalar):
    view = LAYOUTS[layout]
    for i in range(CALLS + 2):  # counted, recorded, then two hits
        x = view(torch.randn(24, 30, device=DEVICE))
        y = view(torch.randn(24, 30, device=DEVICE))
        res, hit = _call(axpy, x, scalar, y)
        assert hit == (i >= CALLS)
        _assert_same(res, _uncached(axpy, x, scalar, y))


def _flat(x, start):
    return x.view(-1)[start : start + 64].view(8, 8)


# name: (the call that records a plan, a call that differs from it in one thing)
NEW_SIGNATURES = {
    "dtype": (lambda x: axpy(x, 2.0, x), lambda x: axpy(x.half(), 2.0, x.half())),
    "shape": (lambda x: axpy(x, 2.0, x), lambda x: axpy(x[:4], 2.0, x[:4])),
    "stride": (
        lambda x: axpy(x, 2.0, x),
        lambda x: axpy(x, 2.0, x.view(16, 8).t()),  # the same data, column-major
    ),
    "broadcast": (lambda x: axpy(x, 2.0, x), lambda x: axpy(x, 2.0, x[:1])),
    "out": (
        lambda x: axpy(x, 2.0, x),
        lambda x: axpy(x, 2.0, x, out0=torch.empty(16, 8, device=DEVICE).t()),
    ),
    "scalar_type": (lambda x: axpy(x, 2.0, x), lambda x: axpy(x, 2, x)),
    "alignment": (
        lambda x: axpy(_flat(x, 0), 2.0, _flat(x, 64)),
        lambda x: axpy(_flat(x, 1), 2.0, _flat(x, 64)),
    ),
}


@pytest.mark.parametrize("change", list(NEW_SIGNATURES))
def test_launch_cache_misses_on_a_new_signature(change):
    first, other = NEW_SIGNATURES[change]
    x = torch.randn(8, 16, device=DEVICE)
    for _ in range(CALLS):  # counted, then recorded
        first(x)
    assert _call(first, x)[1]  # the recorded signature hits
    res, hit = _call(other, x)
    assert not hit
    _assert_same(res, _uncached(other, x))


def test_launch_cache_out_aliasing_input():
    x = torch.randn(16, 8, device=DEVICE)
    y = torch.randn(16, 8, device=DEVICE)
    ref = x.clone()
    for i in range(CALLS + 2):
        assert _call(axpy, x, 0.5, y, out0=x)[1] == (i >= CALLS)
        _uncached(axpy, ref, 0.5, y, out0=ref)
    utils.gems_assert_equal(x, utils.to_reference(ref))


@pytest.mark.parametrize("shape", [(0, 5), (), (1,)])
def test_launch_cache_zero_size_and_zero_dim(shape):
    for i in range(CALLS + 1):
        x = torch.randn(shape, device=DEVICE)
        res, hit = _call(axpy, x, 2.0, x)
        assert hit == (i >= CALLS)
        _assert_same(res, _uncached(axpy, x, 2.0, x))


def test_launch_cache_errors_leave_out_untouched():
    x = torch.randn(8, 16, device=DEVICE)
    out = torch.full((16, 8), 7.0, device=DEVICE)
    ref = out.clone()
    for _ in range(CALLS + 1):
        with pytest.raises(RuntimeError):
            axpy(x, 2.0, x, out0=out)
    utils.gems_assert_equal(out, utils.to_reference(ref))


def test_launch_cache_threads():
    xs = [torch.randn(n, 33, device=DEVICE) for n in (3, 5, 7)]
    refs = [_uncached(axpy, x, 2.0, x) for x in xs]
    results = {}

    def work(k):
        results[k] = [axpy(xs[(i + k) % 3], 2.0, xs[(i + k) % 3]) for i in range(9)]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4
    for k, outs in results.items():
        for i, res in enumerate(outs):
            _assert_same(res, refs[(i + k) % 3])
