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

# pointwise_dynamic's per-signature launch cache (flag_gems/utils/launch_cache.py):
# a call that hits launches the kernel its signature recorded, so its result must be
# bit for bit the result of the uncached path, whatever the layout, and a call whose
# signature changes must miss.

import threading

import pytest
import torch
import triton

import flag_gems
from flag_gems.utils import launch_cache

from . import accuracy_utils as utils

if flag_gems.vendor_name == "kunlunxin":
    from flag_gems.runtime.backend._kunlunxin.utils.pointwise_dynamic import (
        pointwise_dynamic,
    )
else:
    from flag_gems.utils.pointwise_dynamic import pointwise_dynamic

pytestmark = [
    pytest.mark.skipif(
        flag_gems.vendor_name in ("cambricon", "hygon", "spacemit", "tsingmicro"),
        reason="this vendor's own pointwise_dynamic does not use the launch cache yet",
    ),
    pytest.mark.skipif(
        not launch_cache.is_enabled(),
        reason="the launch cache is off (FLAGGEMS_LAUNCH_CACHE=0, or a Triton "
        "it was not proven on)",
    ),
]

DEVICE = flag_gems.device
# calls of a signature until one is recorded (the earlier ones run uncached)
CALLS = launch_cache.ADMIT_AFTER + 1


@triton.jit
def _axpy(x, a, y):
    return x * a + y


axpy = pointwise_dynamic(
    is_tensor=[True, False, True], promotion_methods=[(0, 1, 2, "DEFAULT")]
)(_axpy)


def _uncached(fn, *args, **kwargs):
    was = launch_cache.is_enabled()
    launch_cache.set_enabled(False)
    try:
        return fn(*args, **kwargs)
    finally:
        launch_cache.set_enabled(was)


def _assert_same(res, ref):
    # both results are on the device: compared there, bit for bit
    assert res.dtype == ref.dtype and res.shape == ref.shape
    assert res.stride() == ref.stride()
    assert torch.equal(res, ref)


LAYOUTS = {
    "contiguous": lambda t: t,
    "transpose": lambda t: t.t(),
    "step_slice": lambda t: t[::2, 1::3],
    "expand": lambda t: t[:1].expand(t.shape[0], -1),
}


@pytest.mark.copy_
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.int32])
def test_launch_cache_copy_(dtype):
    # contiguous copies that convert: copy_ runs them through pointwise_dynamic (a
    # small copy of one dtype may go to a backend's native copy, as on KunlunXIN;
    # strided layouts are the axpy tests below)
    src_dtype = torch.float16 if dtype is torch.float32 else torch.float32
    hosts = [torch.randn(24, 30).mul(100).to(src_dtype) for _ in range(CALLS + 2)]
    srcs = [host.to(DEVICE) for host in hosts]
    dsts = [torch.empty(srcs[0].shape, dtype=dtype, device=DEVICE) for _ in hosts]
    launch_cache.clear()
    with flag_gems.use_gems(include=["copy_"]):
        # the first copies are counted, the next records, the others hit
        for dst, src in zip(dsts, srcs):
            dst.copy_(src)
    for dst, host in zip(dsts, hosts):
        utils.gems_assert_equal(dst, utils.to_reference(host.to(DEVICE)).to(dtype))
    assert launch_cache.stats()["hits"] >= 2


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("scalar", [2.5, 3, 1, 32])
def test_launch_cache_hit_matches_uncached(layout, scalar):
    view = LAYOUTS[layout]
    launch_cache.clear()
    for _ in range(CALLS + 2):  # counted, recorded, then two hits
        x = view(torch.randn(24, 30, device=DEVICE))
        y = view(torch.randn(24, 30, device=DEVICE))
        _assert_same(axpy(x, scalar, y), _uncached(axpy, x, scalar, y))
    assert launch_cache.stats()["hits"] == 2


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
    launch_cache.clear()
    for _ in range(CALLS + 1):  # recorded, then a hit
        first(x)
    stats = launch_cache.stats()
    res = other(x)
    assert launch_cache.stats()["misses"] == stats["misses"] + 1
    _assert_same(res, _uncached(other, x))


def test_launch_cache_out_aliasing_input():
    x = torch.randn(16, 8, device=DEVICE)
    y = torch.randn(16, 8, device=DEVICE)
    ref = x.clone()
    launch_cache.clear()
    for _ in range(CALLS + 2):
        axpy(x, 0.5, y, out0=x)
        _uncached(axpy, ref, 0.5, y, out0=ref)
    utils.gems_assert_equal(x, utils.to_reference(ref))
    assert launch_cache.stats()["hits"] == 2


@pytest.mark.parametrize("shape", [(0, 5), (), (1,)])
def test_launch_cache_zero_size_and_zero_dim(shape):
    launch_cache.clear()
    for _ in range(CALLS + 1):
        x = torch.randn(shape, device=DEVICE)
        _assert_same(axpy(x, 2.0, x), _uncached(axpy, x, 2.0, x))
        assert axpy(x, 2.0, x).shape == x.shape
    assert launch_cache.stats()["hits"] >= 1


def test_launch_cache_errors_leave_out_untouched():
    x = torch.randn(8, 16, device=DEVICE)
    out = torch.full((16, 8), 7.0, device=DEVICE)
    ref = out.clone()
    for _ in range(2):
        with pytest.raises(RuntimeError):
            axpy(x, 2.0, x, out0=out)
    utils.gems_assert_equal(out, utils.to_reference(ref))


def test_launch_cache_threads():
    xs = [torch.randn(n, 33, device=DEVICE) for n in (3, 5, 7)]
    refs = [_uncached(axpy, x, 2.0, x) for x in xs]
    launch_cache.clear()
    results = {}

    def work(k):
        results[k] = [axpy(xs[(i + k) % 3], 2.0, xs[(i + k) % 3]) for i in range(9)]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k, outs in results.items():
        for i, res in enumerate(outs):
            _assert_same(res, refs[(i + k) % 3])
    assert len(results) == 4
