"""KunlunXIN copy_ / copy over layouts: the kernel and rank of every launch, no aten
fallback, bit-exact against torch on the host (through dispatch and by direct call,
the functional copy, ranks 1 to 8, same-rank broadcasts, an SDPA mask end to end)."""

import guard_helpers as gh
import pytest
import torch

import flag_gems
from tests.test_copy_ops import _pair_id, _same

pytestmark = pytest.mark.harness


@pytest.mark.copy_
@pytest.mark.parametrize("pair", gh.DTYPE_PAIRS, ids=_pair_id)
@pytest.mark.parametrize("layout", list(gh.LAYOUTS))
def test_copy_layout_dtype_matrix(layout, pair):
    gh.Case(layout, *pair).copy_and_check()


DIRECT_CASES = [(layout, torch.float32, torch.float32) for layout in gh.LAYOUTS]
DIRECT_CASES += gh.cases(
    "expand_row:fp32->bf16 transpose:fp32->bf16 sdpa_mask:bool->bool"
    " sdpa_mask:fp32->fp16 permute4d:i64->i32 step_slice:fp16->fp32"
)


@pytest.mark.copy_
@pytest.mark.parametrize(
    "layout, src_dtype, dst_dtype",
    DIRECT_CASES,
    ids=[f"{c[0]}-{_pair_id(c[1:])}" for c in DIRECT_CASES],
)
def test_copy_direct_call(layout, src_dtype, dst_dtype):
    case = gh.Case(layout, src_dtype, dst_dtype, seed=1)
    case.copy_and_check(gh.copy_module().copy_)


@pytest.mark.copy
@pytest.mark.parametrize("layout", ["transpose", "sdpa_mask", "row_into_transposed"])
def test_copy_functional(layout):
    # the functional copy (a direct call: FlagGems registers no aten::copy) copies
    # src into a tensor of the template's size and strides, broadcast as copy_ does;
    # torch's argument names work (copy(t, src=x[:1], non_blocking=...))
    bases = SAME_RANK_BROADCASTS.get(layout, layout)
    case = gh.Case(bases, torch.float32, torch.bfloat16, seed=2, name=layout)
    with gh.track_paths() as paths:
        out = gh.copy_module().copy(case.dst, src=case.src, non_blocking=False)
    assert paths.fallbacks == 0
    clone = [("_copy_kernel", 1)] * (case.dst.numel() != case.dst_base.numel())
    assert paths.launches == clone + gh.expected_launches(out, case.src), case.name
    assert out.shape == case.dst.shape and out.stride() == case.dst.stride()
    assert out.storage_offset() == case.dst.storage_offset()
    assert out.untyped_storage().data_ptr() != case.dev_dst_base.data_ptr()
    whole = out.as_strided(case.dst_base.shape, case.dst_base.stride(), 0)
    gh.assert_bit_exact(whole, case.reference(), case.name, exact_nans=False)
    gh.assert_bit_exact(case.dev_dst_base, case.dst_base, "the template is not written")


@pytest.mark.copy_
@pytest.mark.parametrize("rank", range(1, 9))
@pytest.mark.parametrize(
    "pair",
    [(torch.float32, torch.float32), (torch.float32, torch.bfloat16)],
    ids=_pair_id,
)
def test_copy_rank_coverage(rank, pair):
    # a reversed permutation into every other element of the innermost dim
    shape = tuple(2 + (i % 2) for i in range(rank))
    reverse = lambda t: t.permute(*reversed(range(rank)))
    dst_shape = shape[:-1] + (2 * shape[-1],)
    layout = (shape[::-1], reverse, dst_shape, lambda t: t[..., ::2])
    case = gh.Case(layout, *pair, seed=rank, name=f"rank{rank}")
    assert gh.expected_launches(case.dst, case.src) == [("copy_slice", rank)]
    case.copy_and_check()


# name: (src base shape, src view, dst base shape, dst view)
SAME_RANK_BROADCASTS = {
    # a (1, C) bias row into (N, C): the most common broadcast there is
    "row_1xC": ((1, 33), _same, (8, 33), _same),
    "row_into_two_rows": ((1, 33), _same, (2, 33), _same),
    "first_row": ((5, 33), lambda s: s[:1], (8, 33), _same),
    "row_into_transposed": ((1, 33), _same, (33, 8), lambda d: d.t()),
    "row_into_step_slice": ((5, 33), lambda s: s[3:4], (8, 66), lambda d: d[:, ::2]),
    # a middle dim: (B, 1, S) sliced out of a bigger tensor, into (B, H, S)
    "middle_dim": ((3, 4, 10), lambda s: s[:, 1:2, ::2], (3, 6, 5), _same),
    "outer_and_inner": ((1, 7, 1), _same, (4, 7, 3), _same),
    "one_element_1x1": ((5, 6), lambda s: s[2:3, 4:5], (3, 4), _same),
    "0d_view": ((6,), lambda s: s[4], (5, 7), _same),
    "0d_into_0d": ((6,), lambda s: s[4], (3,), lambda d: d[2]),
    # one row of an expanded buffer, buf.expand(4, C)[1:2], has shape (1, C) and
    # strides (0, 1): torch reports internal overlap only for a broadcast dim of
    # size > 1, so it is written like any row
    "into_row_of_expanded": ((1, 16), _same, (16,), lambda d: d.expand(4, 16)[1:2]),
}
SAME_RANK_PAIRS = gh.pairs("fp32->fp32 fp32->bf16 i64->fp16 bf16->fp32 i32->bool")


@pytest.mark.copy_
@pytest.mark.parametrize("pair", SAME_RANK_PAIRS, ids=_pair_id)
@pytest.mark.parametrize("layout", list(SAME_RANK_BROADCASTS))
def test_copy_same_rank_broadcast(layout, pair):
    case = gh.Case(SAME_RANK_BROADCASTS[layout], *pair, seed=11, name=layout)
    assert case.src.dim() in (0, case.dst.dim())
    case.copy_and_check()


@pytest.mark.copy_
def test_copy_slice_kernel_is_kept():
    # other kunlunxin ops (slice_scatter, select_scatter) import copy_slice from here
    src = torch.randn(4, 6)
    dst = torch.zeros(8, 6, device=gh.DEVICE)
    gh.strided_module().copy_slice(src.to(gh.DEVICE), out0=dst[::2])
    ref = torch.zeros(8, 6)
    ref[::2] = src
    gh.assert_bit_exact(dst, ref, "copy_slice into a step slice")


@pytest.mark.copy_
@pytest.mark.parametrize("mask_dtype", [torch.bool, torch.float32])
def test_sdpa_expanded_mask(mask_dtype):
    B, H, S, D = 2, 4, 16, 8
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(B, H, S, D, generator=gen) for _ in range(3))
    small = torch.rand(B, 1, 1, S, generator=gen) > 0.3
    small[..., 0] = True  # no fully masked row
    if mask_dtype is not torch.bool:
        small = torch.zeros(B, 1, 1, S).masked_fill(~small, float("-inf"))
    small = small.to(mask_dtype)

    mask = torch.empty(B, H, S, S, dtype=mask_dtype, device=gh.DEVICE)
    with gh.track_paths() as paths:
        gh.gems_copy_(mask, small.to(gh.DEVICE).expand(B, H, S, S))
    assert paths.fallbacks == 0 and paths.launches == [("copy_slice", 4)]
    host_mask = small.expand(B, H, S, S).contiguous()
    gh.assert_bit_exact(mask, host_mask, "sdpa mask")

    dq, dk, dv = (t.to(gh.DEVICE) for t in (q, k, v))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    out = sdpa(dq, dk, dv, attn_mask=mask)
    ref = sdpa(dq, dk, dv, attn_mask=host_mask.to(gh.DEVICE))
    gh.assert_bit_exact(out, ref.cpu(), "sdpa output")
    # the expanded view straight into attention under use_gems, as a model passes it
    with flag_gems.use_gems(include=["copy_"]):
        direct = sdpa(dq, dk, dv, attn_mask=small.to(gh.DEVICE).expand(B, H, S, S))
    torch.testing.assert_close(direct.cpu(), ref.cpu(), rtol=1e-5, atol=1e-5)


def test_runs_flat_is_the_device_models_flat_loop():
    """runs_flat (what the head integration leaves to native) says yes exactly where the
    device model's native copy runs: one flat loop, every other layout faults."""
    from copyfix.emulation import faults

    runs_flat = gh.strided_module().runs_flat
    layouts = {
        "contiguous": lambda: torch.empty(4, 6),
        "transposed": lambda: torch.empty(6, 4).t(),
        "step_slice": lambda: torch.empty(4, 12)[:, ::2],
        "expanded": lambda: torch.empty(1, 6).expand(4, 6),
        "permuted_3d": lambda: torch.empty(2, 3, 4).permute(2, 0, 1).reshape(4, 6),
        "other_shape": lambda: torch.empty(6, 4),
        "transposed_3d": lambda: torch.empty(6, 2, 2).permute(1, 2, 0).reshape(4, 6),
    }
    seen = set()
    for d_name, make_dst in layouts.items():
        for s_name, make_src in layouts.items():
            dst, src = make_dst(), make_src()
            want = faults.is_flat_loop(dst, src)
            assert runs_flat(dst, src) == want, (d_name, s_name)
            seen.add(want)
    assert seen == {True, False}
    # dense with equal strides, neither contiguous: flat
    assert runs_flat(torch.empty(6, 4).t(), torch.empty(6, 4).t())
    assert not runs_flat(torch.empty(6, 4).t(), torch.empty(4, 6))
    # overlapping with equal strides: not flat
    assert not runs_flat(torch.empty(1, 6).expand(4, 6), torch.empty(1, 6).expand(4, 6))
    # both contiguous, with strides that differ in a size-1 dim: flat
    dst, src = torch.empty(1, 6), torch.empty(6, 1).t()
    assert dst.stride() != src.stride() and faults.is_flat_loop(dst, src)
    assert runs_flat(dst, src)
