"""copyfix.measure.floors on the host: the kernels launch through ``CompiledKernel.run``
(the emulation's stand-in in cpu mode) and compute what they claim; of the CUDA-key
torch.library ops only the registration is checked, their bodies called directly."""

import pytest

from copyfix import emulation

MODE = emulation.activate()  # before flag_gems (and any kernel) is defined

import torch  # noqa: E402

import flag_gems  # noqa: E402, F401
from copyfix.emulation.interpreter import InterpretedKernel  # noqa: E402
from copyfix.measure import floors  # noqa: E402

pytestmark = pytest.mark.harness


@pytest.fixture(autouse=True)
def handles(monkeypatch):
    # a compiled kernel loads its handles on request; the interpreter has none to load
    if not hasattr(InterpretedKernel, "_init_handles"):
        monkeypatch.setattr(
            InterpretedKernel, "_init_handles", lambda self: None, raising=False
        )


def test_copy_floor_copies_and_is_registered():
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    x = x.to(emulation.device())
    dst = torch.zeros_like(x)
    op, launch = floors.copy_floor(torch, x)
    assert launch(dst, x) is dst and torch.equal(dst, x)
    assert op is torch.ops.copyfix_floor_copy.copy_
    assert torch._C._dispatch_has_kernel_for_dispatch_key(op.default.name(), "CUDA")


def test_sigmoid_floor_kernel_computes_sigmoid():
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(1))
    x = x.to(emulation.device())
    k, grid, driver = floors._compiled(torch, "sigmoid", x)
    out = torch.empty_like(x)
    k.run(*grid, driver.get_current_stream(driver.get_current_device()), k.function,
          k.packed_metadata, None, None, None, x, out, x.numel(), floors.BLOCK)  # fmt: skip
    torch.testing.assert_close(out, torch.sigmoid(x))
