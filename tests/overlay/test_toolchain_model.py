"""The KunlunXIN toolchain's conversion faults (copyfix.emulation.toolchain).

The model must fail what the XPU toolchain fails: each conversion upstream's own
``_kunlunxin/ops/to.py`` (cf99ee03) works around, written directly, through the fold
compiled Triton applies, or through Triton's own float32 detour; and pass what the
workaround does (a second kernel that loads the float32 intermediate).  And the
KunlunXIN ``copy_`` and ``_to_copy`` give torch's result for each such pair under it.
"""

import pytest
import torch
import triton
import triton.language as tl

from copyfix import emulation

MODE = emulation.activate()

import flag_gems  # noqa: E402
from copyfix.emulation import toolchain  # noqa: E402

pytestmark = [
    pytest.mark.harness,
    pytest.mark.skipif(MODE != "cpu", reason="the model is the cpu emulation's"),
]

TL = {
    getattr(torch, n): getattr(tl, n)
    for n in ("int16", "int32", "float16", "float32", "bfloat16")
}
PAIRS = [
    (torch.int32, torch.float16),
    (torch.int32, torch.bfloat16),
    (torch.float16, torch.bfloat16),
    (torch.int16, torch.bfloat16),
]


@triton.jit
def _convert(src, dst, n, DST: tl.constexpr, VIA_FP32: tl.constexpr):
    offs = tl.arange(0, 16)
    mask = offs < n
    x = tl.load(src + offs, mask=mask)
    if VIA_FP32:
        x = x.to(tl.float32)
    tl.store(dst + offs, x.to(DST), mask=mask)


def _values(dtype):
    return (torch.arange(-8, 8) * 37 + 1).to(dtype)


def _run(src, dst_dtype, via_fp32=False):
    dst = torch.empty(src.shape, dtype=dst_dtype)
    _convert[(1,)](src, dst, src.numel(), DST=TL[dst_dtype], VIA_FP32=via_fp32)
    return dst


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{p[0]}->{p[1]}")
def test_each_faulting_conversion_fails_and_its_workaround_runs(pair):
    src_dtype, dst_dtype = pair
    src = _values(src_dtype)
    why = toolchain.FAULTS[(TL[src_dtype].name, TL[dst_dtype].name)]
    with toolchain.everywhere():
        for via_fp32 in (False, True):  # (direct, and through Triton's fp32 detour)
            with pytest.raises(Exception) as info:
                _run(src, dst_dtype, via_fp32)
            assert "copyfix model of the KunlunXIN Triton toolchain" in str(info.value)
            assert why in str(info.value)
        # the workaround compiles: two kernels through a float32 tensor
        got = _run(_run(src, torch.float32), dst_dtype)
    assert torch.equal(got, src.to(dst_dtype))


def test_other_conversions_compile():
    for src_dtype, dst_dtype in [
        (torch.float32, torch.float16),
        (torch.float32, torch.bfloat16),
        (torch.int16, torch.float16),
        (torch.bfloat16, torch.float32),
    ]:
        src = _values(src_dtype)
        with toolchain.everywhere():
            assert torch.equal(_run(src, dst_dtype), src.to(dst_dtype))


def test_the_model_covers_kunlunxin_launches_only():
    """A generic kernel launched from here stands for another vendor's toolchain."""
    src = _values(torch.int32)
    assert torch.equal(_run(src, torch.float16), src.to(torch.float16))
    assert not toolchain.active()
    # the same launch from a module of the KunlunXIN backend is covered
    scope = {"__name__": "_kunlunxin.ops.stand_in", "_run": _run, "torch": torch}
    exec("def launch(src):\n    return _run(src, torch.float16)\n", scope)
    with pytest.raises(Exception, match="aborts the XPU LLVM lowering"):
        scope["launch"](src)
    assert not toolchain.active()


LAYOUTS = {
    "contiguous": lambda t: t,
    "transposed": lambda t: t.t().contiguous().t(),
    "step_slice": lambda t: torch.cat([t, t], 1)[:, ::2],
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{p[0]}->{p[1]}")
def test_kunlunxin_copy_and_to_give_torchs_result_under_the_model(pair, layout):
    src_dtype, dst_dtype = pair
    base = (torch.arange(-24, 24).reshape(6, 8) * 1371 + 1).to(src_dtype)
    if src_dtype is torch.float16:
        base = base / 7  # values bf16 must round
        base[0, :3] = torch.tensor([float("nan"), float("inf"), -float("nan")])
    src = LAYOUTS[layout](base)
    want = src.to(dst_dtype)
    with flag_gems.use_gems():
        copied = torch.empty(src.shape, dtype=dst_dtype).copy_(src)
        converted = src.to(dst_dtype)
    for got in (copied, converted):
        assert torch.equal(got.view(torch.int16), want.view(torch.int16))
