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

"""KunlunXIN copy_ raises torch's error, with torch's text, before writing anything:
illegal broadcasts, overlap torch refuses, internal overlap of the destination."""

import guard_helpers as gh
import pytest
import torch

pytestmark = pytest.mark.harness


@pytest.mark.copy_
@pytest.mark.parametrize(
    "dst_shape, src_shape",
    [
        ((2, 3), (4,)),
        ((2, 3), (4, 3)),
        ((3,), (2, 3)),
        ((1, 3), (2, 3)),
        ((0, 3), (4,)),
        ((4, 3), (2, 3)),  # a half batch into a full buffer
        ((3,), (4, 3)),  # a batch into one row
        ((0, 3), (4, 3)),  # a batch into an empty buffer
    ],
)
def test_copy_illegal_broadcast(dst_shape, src_shape):
    expected = gh.torch_error(
        lambda: torch.zeros(dst_shape).copy_(torch.ones(src_shape))
    )
    dst = torch.full(dst_shape, 7.0, device=gh.DEVICE)
    src = torch.ones(src_shape, device=gh.DEVICE)
    with gh.track_paths() as paths, pytest.raises(expected[0]) as err:
        gh.gems_copy_(dst, src)
    assert str(err.value) == expected[1]
    assert paths.launches == [] and paths.fallbacks == 0
    assert bool((dst.cpu() == 7.0).all()), "destination was written before the error"


def _overlap_cases():
    def internal(x):
        return x[0].expand(4, 4), torch.ones(4, 4, device=x.device)

    def internal_and_bad_shape(x):  # torch reports the overlap first
        return x[0].expand(4, 4), torch.ones(3, device=x.device)

    def transpose(x):
        return x, x.t()

    def shifted(x):
        return x[1:], x[:-1]

    def element_inside(x):  # a one-element source inside the written row
        return x[0, :3], x[0, 1]

    def transpose_back(x):
        return x.t(), x

    def element_in_wider_element(x):  # an int16 inside the int32 it is part of
        return x.view(torch.int16).view(-1)[1:2], x.view(torch.int32).view(-1)[:1]

    def empty_source_inside(x):  # no bytes, so no overlap: torch's broadcast error
        return x[0], x[0, 2:2]

    def shifted_back(x):
        return x[:-1], x[1:]

    def empty_far_reaching_source(x):  # no bytes, so no overlap: the broadcast error
        # (an empty view's data_ptr() is null, yet its strides may span past the
        # storage: as_strided checks no storage for it)
        return x.view(-1), x.as_strided((2**50, 0), (1, 1))

    def partial_and_bad_shape(x):  # torch reports the overlap first
        return x.view(-1)[:6], x.view(-1)[4:8]

    return {
        "internal": internal,
        "internal_and_bad_shape": internal_and_bad_shape,
        "transpose": transpose,
        "shifted": shifted,
        "element_inside": element_inside,
        "transpose_back": transpose_back,
        "element_in_wider_element": element_in_wider_element,
        "empty_source_inside": empty_source_inside,
        "shifted_back": shifted_back,
        "empty_far_reaching_source": empty_far_reaching_source,
        "partial_and_bad_shape": partial_and_bad_shape,
    }


@pytest.mark.copy_
@pytest.mark.parametrize("kind", list(_overlap_cases()))
def test_copy_overlap_errors(kind):
    make = _overlap_cases()[kind]
    cpu = torch.arange(16.0).view(4, 4)
    expected = gh.torch_error(lambda: (lambda d, s: d.copy_(s))(*make(cpu.clone())))
    x = cpu.to(gh.DEVICE, copy=True)
    with gh.track_paths() as paths, pytest.raises(expected[0]) as err:
        gh.gems_copy_(*make(x))
    assert str(err.value) == expected[1]
    assert paths.launches == [] and paths.fallbacks == 0
    gh.assert_bit_exact(x, cpu, f"{kind}: destination untouched")


@pytest.mark.copy_
@pytest.mark.parametrize(
    "views",
    [lambda x: (x[:3], x[1:1]), lambda x: (x, x[:3]), lambda x: (x[:3], x)],
    ids=["empty_source", "source_is_a_prefix", "destination_is_a_prefix"],
)
def test_copy_alias_size_mismatch_reports_the_broadcast_error(views):
    # torch checks overlap only for non-empty tensors, and a view of the same start
    # and strides is a no-op only at the same shape: the size mismatch is the error
    expected = gh.torch_error(lambda: (lambda d, s: d.copy_(s))(*views(torch.zeros(6))))
    x = torch.full((6,), 7.0, device=gh.DEVICE)
    with pytest.raises(expected[0]) as err:
        gh.gems_copy_(*views(x))
    assert str(err.value) == expected[1]
    assert bool((x.cpu() == 7.0).all())


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
