"""PR 7's launch cache when off (default, unknown Triton, disabled): uncached."""

import os

import pytest

from copyfix import emulation

MODE = emulation.activate()  # before flag_gems is imported

import torch  # noqa: E402
import triton  # noqa: E402

from flag_gems.ops.add import add_func  # noqa: E402  (a pointwise_dynamic function)
from flag_gems.utils import launch_cache as lc  # noqa: E402

pytestmark = pytest.mark.harness
DEV = emulation.device()


def test_on_only_where_asked_for_and_the_launcher_is_known():
    with lc.enabled(True):
        assert lc.is_enabled() == lc._ABI_KNOWN
        assert lc._ABI_KNOWN == (
            lc._launcher_convention(triton.__version__) is not None
        )
    asked = os.environ.get("FLAGGEMS_LAUNCH_CACHE") == "1"
    assert lc.is_enabled() == (asked and lc._ABI_KNOWN)


def test_every_call_is_the_uncached_path():
    lc.clear()
    for seed in range(4):
        x = torch.randn(6, 8, generator=torch.Generator().manual_seed(seed)).to(DEV)
        with lc.enabled(False):
            got = add_func(x.t(), x.t(), 0.5)
            assert not lc.is_enabled()
        assert got.stride() == x.t().stride() or got.is_contiguous()
        assert torch.equal(got, x.t() + x.t() * 0.5)  # exact in fp32: x + x*0.5
    assert not add_func._launch_cache.plans and not add_func._launch_cache.seen
    assert lc.stats() == {"hits": 0, "misses": 0, "recordings": 0, "plans": 0}
