"""KunlunXIN copy_ under hypothesis: random shapes, views, negation bits and dtype
pairs, each launch counted and the result compared with torch's bit for bit."""

import os

import guard_helpers as gh
import hypothesis
import pytest
import torch

pytestmark = pytest.mark.harness


FUZZ_EXAMPLES = int(os.environ.get("GEMS_COPY_FUZZ_EXAMPLES", "300"))
st = hypothesis.strategies


@st.composite
def strided_views(draw, shape, allow_broadcast):
    """A view of `shape` over a fresh base: permuted, stepped, offset, maybe expanded."""
    rank = len(shape)
    dims = [  # per dim: (broadcast, step, start)
        (
            allow_broadcast and size != 1 and draw(st.integers(0, 5)) == 0,
            draw(st.sampled_from([1, 1, 2, 3])),
            draw(st.integers(0, 1)),
        )
        for size in shape
    ]
    dropped = draw(st.integers(0, rank)) if allow_broadcast else 0
    # same-rank broadcast: a broadcast dim stays a size-1 slice with its real
    # stride, as in x[:1] or a (1, C) row, instead of being expanded
    implicit = allow_broadcast and draw(st.booleans())
    perm = draw(st.permutations(range(rank - dropped)))
    kept = dims[dropped:]
    kept_shape = shape[dropped:]
    base_shape = [
        1 + start if b else n * step + start
        for n, (b, step, start) in zip(kept_shape, kept)
    ]
    negated = draw(st.sampled_from([False, False, True]))

    def view(base):
        t = base.permute(sorted(range(len(perm)), key=lambda i: perm[i]))
        index = tuple(
            slice(start, start + 1) if b else slice(start, start + n * step, step)
            for n, (b, step, start) in zip(kept_shape, kept)
        )
        t = t[index] if implicit else t[index].expand(kept_shape)
        return torch._neg_view(t) if negated else t

    spec = f"base{tuple(base_shape[p] for p in perm)}.permute(inv{tuple(perm)})[{kept}] over {shape}"
    spec += " (broadcast by copy_)" if implicit else ""
    spec += " negated" if negated else ""
    return tuple(base_shape[p] for p in perm), view, spec


@st.composite
def copy_problems(draw):
    rank = draw(st.integers(0, 6))
    shape = tuple(draw(st.sampled_from([0, 1, 1, 2, 2, 3, 3, 4])) for _ in range(rank))
    pair = draw(st.sampled_from(gh.DTYPE_PAIRS))
    src = draw(strided_views(shape, allow_broadcast=True))
    dst = draw(strided_views(shape, allow_broadcast=False))
    return shape, pair, src, dst


@pytest.mark.copy_
@hypothesis.settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=bool(os.environ.get("CI")),
    suppress_health_check=list(hypothesis.HealthCheck),
)
@hypothesis.given(problem=copy_problems(), seed=st.integers(0, 2**16))
def test_copy_fuzz(problem, seed):
    shape, (src_dtype, dst_dtype), src, dst = problem
    name = f"src={src[2]} dst={dst[2]}"
    hypothesis.note(name)
    case = gh.Case((*src[:2], *dst[:2]), src_dtype, dst_dtype, seed=seed, name=name)
    # negation into bool raises in torch (test_copy_negation_into_bool)
    negation = case.src.is_neg() != case.dst.is_neg()
    hypothesis.assume(not (negation and dst_dtype is torch.bool))
    assert case.dst.shape == shape
    case.copy_and_check()
