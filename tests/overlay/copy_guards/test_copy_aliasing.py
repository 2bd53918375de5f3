"""KunlunXIN copy_ where source and destination share memory, and special tensors:
the snapshot taken exactly when the source must be read first, no-ops, empty
and zero tensors, conjugate and negation bits on one storage (0-d: test_copy_layouts)."""

import contextlib

import guard_helpers as gh
import pytest
import torch

pytestmark = pytest.mark.harness


# Aliasing and special tensors, each against torch's result or error (destination
# untouched on an error), cut from 16-element buffers.
# (aliasing views without a flag: _READ_FIRST below)
_ALIASING = ["overlapping_views_neg", "self_view", "self_neg"]
# variant: kernels launched (each at the destination's rank); None: an error
_VARIANT_KERNELS = {
    "src_neg": ["copy_slice", "_negate_kernel"],
    "dst_neg": ["copy_slice", "_negate_kernel"],
    "src_zero": [],  # dst.zero_()
    "dst_zero": None,
    "src_meta": None,  # the fallback raises torch's error
    "overlapping_views_neg": ["copy_slice", "copy_slice", "_negate_kernel"],
    "self_view": [],  # the same view: a no-op
    "self_neg": ["_copy_kernel", "_negate_kernel"],  # x <- -x, in place
}


def _views(variant, dst_buf, src_buf):
    """The variant's dst and src layouts, cut from 16-element buffers."""
    if variant == "overlapping_views_neg":  # not dense: torch reads all first
        return dst_buf.view(4, 4)[1:, :3], src_buf.view(4, 4)[:3, 1:]
    if variant == "self_view":
        return dst_buf.view(4, 4).t(), src_buf.view(4, 4).t()
    if variant in ("src_zero", "dst_zero", "self_neg"):
        return dst_buf.view(4, 4), src_buf.view(4, 4)
    return dst_buf.view(4, 4), src_buf.view(4, 4).t()


def _variant(variant, buf, src_buf):
    dst, src = _views(variant, buf, buf if variant in _ALIASING else src_buf)
    if variant in ("src_neg", "overlapping_views_neg", "self_neg"):
        src = torch._neg_view(src)
    elif variant == "dst_neg":
        dst = torch._neg_view(dst)
    elif variant == "src_zero":
        src = torch._efficientzerotensor(src.shape, device=src.device)
    elif variant == "dst_zero":
        dst = torch._efficientzerotensor(dst.shape, device=dst.device)
    elif variant == "src_meta":
        src = src.to("meta")
    return dst, src


@pytest.mark.copy_
@pytest.mark.parametrize("variant", list(_VARIANT_KERNELS))
def test_copy_alias_and_special_tensors(variant):
    # a negation bit, a zero tensor on either side, a meta source, a flagged or
    # identical view of the destination's bytes: torch's result or error
    cpu = torch.arange(16, dtype=torch.float32) - 5
    aliasing = variant in _ALIASING
    ref_buf = cpu.clone() if aliasing else torch.zeros(16)
    buf = ref_buf.to(gh.DEVICE, copy=True)
    dst, src = _variant(variant, buf, cpu.to(gh.DEVICE))
    ref_dst, ref_src = _variant(variant, ref_buf, cpu)
    if variant == "overlapping_views_neg":  # every element reads its old value
        ref_src = ref_src.clone()
    before = gh.host_view(buf).clone()
    try:
        ref_dst.copy_(ref_src)
        error = None
    except Exception as exc:  # noqa: BLE001 - we compare whatever torch raises
        error = exc
    kernels = _VARIANT_KERNELS[variant]
    assert (error is None) == (kernels is not None), f"torch: {error!r}"
    raises = contextlib.nullcontext() if error is None else pytest.raises(type(error))
    with gh.track_paths() as paths, raises as err:
        out = gh.copy_module().copy_(dst, src)
    if error is None:
        assert out is dst
        gh.assert_bit_exact(buf, ref_buf, variant)
    else:
        assert str(err.value) == str(error)
        gh.assert_bit_exact(buf, before, f"{variant}: destination untouched")
    assert paths.fallbacks == (variant == "src_meta")
    assert paths.launches == [(k, dst.dim()) for k in kernels or []]


@pytest.mark.copy_
def test_copy_empty():
    with gh.track_paths() as paths:
        gh.gems_copy_(
            torch.empty(0, 3, device=gh.DEVICE), torch.ones(3, device=gh.DEVICE)
        )
        gh.gems_copy_(
            torch.empty(3, 0, device=gh.DEVICE).t(),
            torch.empty(3, device=gh.DEVICE).expand(0, 3),
        )
        # an empty view of a buffer overlapping the source's bytes (its sizes and
        # strides span them): no element, so no overlap either, as torch
        x = torch.arange(16.0, device=gh.DEVICE)
        torch.zeros(16).view(4, 4)[:, :0].copy_(torch.zeros(16)[5:6])  # torch: ok
        gh.gems_copy_(x.view(4, 4)[:, :0], x[5:6])
        # an empty view's data_ptr() is null: no bytes, no overlap, nothing to do
        # (torch's copy_ is a no-op too), be it an int16 view pointing into the int32
        # it aliases, or one whose strides span 2**50 elements (as_strided checks no
        # storage for an empty view)
        for dst, src in (
            (x.view(torch.int16)[1:1], x.view(torch.int32)[:1]),
            (x.as_strided((2**50, 0), (1, 1)), x[:1]),
        ):
            assert dst.data_ptr() == 0 and torch._C._is_alias_of(dst, src)
            gh.gems_copy_(dst, src)
        # an empty destination with a stride-0 dim of size > 1: no internal
        # overlap for torch (no element at all)
        dst = torch.empty(1, device=gh.DEVICE).as_strided((4, 0), (0, 1))
        torch.empty(1).as_strided((4, 0), (0, 1)).copy_(torch.ones(4, 0))  # torch: ok
        gh.gems_copy_(dst, torch.ones(4, 0, device=gh.DEVICE))
    assert paths.launches == [] and paths.fallbacks == 0
    gh.assert_bit_exact(x, torch.arange(16.0), "empty destinations: x untouched")


def _sq(x):
    return x.view(4, 4)


_READ_FIRST = {
    # name: (views of one 16-float buffer, expected: True, False or "raise")
    "dense_same_span_other_strides": (lambda x: (_sq(x), _sq(x).t()), "raise"),
    "dense_shifted": (lambda x: (x[4:12], x[:8]), "raise"),
    "dense_shifted_back": (lambda x: (x[:8], x[4:12]), "raise"),
    "dense_element_inside": (lambda x: (x[:3], x[1]), "raise"),
    # one element shared: src's last is dst's first, and back
    "dense_one_shared": (lambda x: (x[7:15], x[:8]), "raise"),
    "dense_one_shared_back": (lambda x: (x[:8], x[7:15]), "raise"),
    # float32 [0, 32) and int16 [24, 40); float32 [16, 48) and int16 [0, 16)
    "dtypes_bytes_shared": (lambda x: (x[:8], x.view(torch.int16)[12:20]), "raise"),
    "dtypes_adjacent": (lambda x: (x[4:12], x.view(torch.int16)[:8]), False),
    "dense_identical": (lambda x: (x.view(torch.int32), x), False),
    "dense_adjacent": (lambda x: (x[8:], x[:8]), False),
    "dense_adjacent_back": (lambda x: (x[:8], x[8:]), False),
    "dense_empty_src": (lambda x: (x[:0], x), False),
    "dense_empty_dst": (lambda x: (x, x[3:3]), False),
    # an empty view whose sizes and strides span bytes: still no element, no overlap
    "empty_dst_spanning": (lambda x: (_sq(x)[:, :0], x[5:6]), False),
    "empty_src_spanning": (lambda x: (x[5:6], _sq(x)[:, :0]), False),
    "non_dense_overlapping": (lambda x: (_sq(x)[1:, :3], _sq(x)[:3, 1:]), True),
    "non_dense_interleaved": (lambda x: (x[::2], x[1::2]), True),
    "non_dense_one_shared": (lambda x: (x[4:9:2], x[0:5:2]), True),
    "non_dense_one_shared_back": (lambda x: (x[0:5:2], x[4:9:2]), True),
    "interleaved_rows": (lambda x: (_sq(x)[:, ::2], _sq(x)[:, 1::2]), True),
    "row_from_column": (lambda x: (_sq(x)[0], _sq(x)[:, 0]), True),
    "strided_rows_down": (lambda x: (_sq(x)[2:, ::2], _sq(x)[:2, ::2]), False),
    "strided_rows_up": (lambda x: (_sq(x)[:2, ::2], _sq(x)[2:, ::2]), False),
    "dense_gap": (lambda x: (x[10:], x[:6]), False),
    "dense_gap_back": (lambda x: (x[:6], x[10:]), False),
    "non_dense_gap": (lambda x: (x[10::2], x[:6:2]), False),
    "non_dense_touching": (lambda x: (x[5:10:2], x[0:5:2]), False),
    "non_dense_touching_back": (lambda x: (x[0:5:2], x[5:10:2]), False),
    "non_dense_disjoint": (lambda x: (x[8::2], x[:8:2]), False),
    "dense_into_non_dense": (lambda x: (_sq(x)[:, 0], x[3:7]), True),
}


@pytest.mark.copy_
@pytest.mark.parametrize("case", list(_READ_FIRST))
def test_must_read_src_first(case):
    make, expected = _READ_FIRST[case]
    dst, src = make(torch.zeros(16, device=gh.DEVICE))
    must_read_src_first = gh.strided_module()._must_read_src_first
    if expected == "raise":
        torch_expected = gh.torch_error(
            lambda: (lambda d, s: d.copy_(s))(*make(torch.zeros(16)))
        )
        with pytest.raises(torch_expected[0]) as err:
            must_read_src_first(dst, src)
        assert str(err.value) == torch_expected[1]
    else:
        assert must_read_src_first(dst, src) is expected


# every copy within one buffer (no empty side): torch's error, nothing written; else a
# snapshot exactly when the source must be read first, and torch's result
_IN_BUFFER = [c for c in _READ_FIRST if "empty" not in c]


@pytest.mark.copy_
@pytest.mark.parametrize("case", _IN_BUFFER)
def test_copy_alias_snapshot_is_taken_when_must_read_src_first(case):
    make, snapshot = _READ_FIRST[case]
    if snapshot == "raise":
        gh.assert_torch_error(lambda dev: (*make(x := torch.randn(16).to(dev)), x))
        return
    cpu = torch.randn(16)
    x = cpu.to(gh.DEVICE, copy=True)
    dst, src = make(x)
    with gh.track_paths() as paths:
        gh.gems_copy_(dst, src)
    ref = cpu.clone()
    ref_dst, ref_src = make(ref)
    ref_dst.copy_(ref_src.clone())  # every element reads its old value
    assert paths.fallbacks == 0
    assert paths.launches == gh.expected_launches(dst, src, snapshot)
    gh.assert_bit_exact(x, ref, case)


@pytest.mark.copy_
@pytest.mark.parametrize("side", ["dst", "src"])
@pytest.mark.parametrize("bit", ["conj", "neg"])
def test_copy_between_a_tensor_and_its_flagged_view_is_not_a_noop(bit, side):
    # same memory, offset, strides, size and dtype; only one side has the conjugate
    # or negation bit: not the self-alias no-op (torch writes conj(z) into z's memory,
    # complex going to aten; or negates the memory, signed zeros too, in Triton)
    def views(x):
        flagged = x.conj() if bit == "conj" else torch._neg_view(x)
        return (flagged, x) if side == "dst" else (x, flagged)

    if bit == "conj":
        cpu = torch.tensor([1 + 2j, -3 - 4j, 5j], dtype=torch.complex64)
    else:
        cpu = torch.tensor([[1.0, -2.0, 0.0], [3.5, -0.0, float("inf")]])
    ref = cpu.clone()
    (lambda d, s: d.copy_(s))(*views(ref))
    x = cpu.to(gh.DEVICE, copy=True)
    with gh.track_paths() as paths:  # (conj: a direct call, as other ops make it)
        (gh.copy_module().copy_ if bit == "conj" else gh.gems_copy_)(*views(x))
    assert paths.fallbacks == (bit == "conj")
    gh.assert_bit_exact(x, ref, f"{side} {bit}, same memory")
