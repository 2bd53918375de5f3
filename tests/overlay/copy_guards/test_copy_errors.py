"""KunlunXIN copy_ raises torch's error, with torch's text, before writing anything:
illegal broadcasts, overlap torch refuses, internal overlap of the destination."""

import guard_helpers as gh
import pytest
import torch

pytestmark = pytest.mark.harness


def _flat(x, a, b):
    return x.view(-1)[a:b]


def _row(x):  # (overlaps every row of a (4, 4) destination)
    return x[0].expand(4, 4)


_OVERLAP = {
    "internal": lambda x: (_row(x), torch.ones(4, 4, device=x.device)),
    # torch reports the overlap first
    "internal_and_bad_shape": lambda x: (_row(x), torch.ones(3, device=x.device)),
    "transpose": lambda x: (x, x.t()),
    "shifted": lambda x: (x[1:], x[:-1]),
    "element_inside": lambda x: (x[0, :3], x[0, 1]),  # inside the written row
    "transpose_back": lambda x: (x.t(), x),
    # an int16 inside the int32 it is part of
    "element_in_wider_element": lambda x: (
        _flat(x.view(torch.int16), 1, 2),
        _flat(x.view(torch.int32), 0, 1),
    ),
    # no bytes, so no overlap: torch's broadcast error (an empty view's data_ptr() is
    # null, yet its strides may span past the storage: as_strided checks none)
    "empty_source_inside": lambda x: (x[0], x[0, 2:2]),
    "shifted_back": lambda x: (x[:-1], x[1:]),
    "empty_far_reaching_source": lambda x: (
        x.view(-1),
        x.as_strided((2**50, 0), (1, 1)),
    ),
    "partial_and_bad_shape": lambda x: (_flat(x, 0, 6), _flat(x, 4, 8)),  # overlap 1st
    # a view of the same start and strides is a no-op only at the same shape
    "alias_empty_source": lambda x: (_flat(x, 0, 3), _flat(x, 1, 1)),
    "alias_source_is_a_prefix": lambda x: (_flat(x, 0, 6), _flat(x, 0, 3)),
    "alias_destination_is_a_prefix": lambda x: (_flat(x, 0, 3), _flat(x, 0, 6)),
}
# illegal broadcasts (dst shape, src shape), into a fresh buffer; the last three: a
# half batch into a full buffer, a batch into one row, a batch into an empty buffer
_BROADCAST = [((2, 3), (4,)), ((2, 3), (4, 3)), ((3,), (2, 3)), ((1, 3), (2, 3))]
_BROADCAST += [((0, 3), (4,)), ((4, 3), (2, 3)), ((3,), (4, 3)), ((0, 3), (4, 3))]


def _make(kind, device):
    if kind in _OVERLAP:
        x = torch.arange(16.0, device=device).view(4, 4)
        return (*_OVERLAP[kind](x), x)
    dst_shape, src_shape = kind
    dst = torch.full(dst_shape, 7.0, device=device)
    return dst, torch.ones(src_shape, device=device), dst


@pytest.mark.copy_
@pytest.mark.parametrize("kind", _BROADCAST + list(_OVERLAP), ids=str)
def test_copy_errors(kind):
    gh.assert_torch_error(lambda device: _make(kind, device))


@pytest.mark.copy_
def test_copy_internal_overlap_is_checked_for_a_non_empty_destination_only(
    monkeypatch,
):
    # at::has_internal_overlap calls an empty tensor dense; FlagGems' helper does
    # too, and torch calls it contiguous, which copy_ asks first: pinned with a
    # helper that says Yes, an empty (also a permuted empty) dst still copies, a
    # non-contiguous one raises
    mod, op = gh.strided_module(), gh.copy_module()
    monkeypatch.setattr(mod, "has_internal_overlapping", lambda t: mod.MemOverlap.Yes)
    for empty in (
        torch.empty(0, 3, device=gh.DEVICE),
        torch.empty(3, 0, device=gh.DEVICE).t(),
    ):
        with gh.track_paths() as paths:
            assert op.copy_(empty, torch.ones(3, device=gh.DEVICE)) is empty
        assert paths.launches == [] and paths.fallbacks == 0
    dst = torch.zeros(3, 2, device=gh.DEVICE).t()
    with pytest.raises(RuntimeError, match="more than one element of the written-to"):
        op.copy_(dst, torch.ones(3, device=gh.DEVICE))
    assert bool((dst.cpu() == 0).all())
