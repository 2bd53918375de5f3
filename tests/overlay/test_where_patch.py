"""PR 6's patch to ops/where.py: equal shapes skip ``torch.broadcast_shapes`` (Python
code that cost more than the cached launch it preceded), the output comes from
``torch.empty_strided`` with ``torch.empty``'s strides. Each test runs the composed
(patched) module beside the base's pre-image, kept by the composer, and compares both
with torch bit for bit. ``where_self_out`` refuses tensors all on the host ("CPU
only"): in cpu mode each module's ``filter`` is shadowed so the host counts as the
device; the kernels run (Triton's interpreter in cpu mode).
"""

import contextlib
import importlib
from unittest import mock

import pytest

from copyfix import emulation

MODE = emulation.activate()  # before flag_gems is imported

import torch  # noqa: E402

import flag_gems  # noqa: E402, F401
from copyfix.measure import base_twins  # noqa: E402

pytestmark = pytest.mark.harness
DEV = emulation.device()
PATCHED = importlib.import_module("flag_gems.ops.where")


@pytest.fixture(scope="module")
def modules():
    base = base_twins._load_preimage(PATCHED.__name__, "ops/where.py")
    with contextlib.ExitStack() as stack:
        for m in (PATCHED, base) if MODE == "cpu" else ():
            host_ok = lambda keep, items: list(items)
            stack.enter_context(mock.patch.object(m, "filter", host_ok, create=True))
        yield {"patched": PATCHED, "base": base}


def _t(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


CASES = {
    "equal": lambda: (_t(4, 6) > 0, _t(4, 6, seed=1), _t(4, 6, seed=2)),
    "equal-strided": lambda: (
        _t(6, 4) > 0,
        _t(6, 4, seed=1).t().contiguous().t(),
        _t(4, 6, seed=2).t(),
    ),
    "broadcast": lambda: (_t(4, 1) > 0, _t(4, 6, seed=1), _t(6, seed=2)),
    "promoted": lambda: (
        _t(4, 6) > 0,
        _t(4, 6, seed=1, dtype=torch.float16),
        _t(4, 6, seed=2),
    ),
    "zero-dim": lambda: (_t() > 0, _t(seed=1), _t(seed=2)),
    "empty": lambda: (_t(0, 3) > 0, _t(0, 3, seed=1), _t(0, 3, seed=2)),
    "empty-inner": lambda: (_t(3, 0, 2) > 0, _t(3, 0, 2, seed=1), _t(3, 0, 2, seed=2)),
    "size-one": lambda: (_t(1, 4, 1) > 0, _t(1, 4, 1, seed=1), _t(1, 4, 1, seed=2)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_patched_where_is_the_base_s_and_torch_s(modules, case):
    cond, a, b = CASES[case]()
    ref = torch.where(cond, a, b)
    strides = {}
    for name, m in modules.items():
        got = m.where_self_out(cond.to(DEV), a.to(DEV), b.to(DEV))
        assert got.dtype == ref.dtype and got.shape == ref.shape, name
        assert torch.equal(got.cpu(), ref), name
        strides[name] = got.stride()
    # the patch allocates through empty_strided: torch.empty's strides, as the base
    assert strides["patched"] == strides["base"] == ref.contiguous().stride()


def test_given_out_is_written_as_before(modules):
    cond, a, b = CASES["broadcast"]()
    ref = torch.where(cond, a, b)
    for m in modules.values():
        out = torch.zeros(4, 6, device=DEV)
        assert m.where_self_out(cond.to(DEV), a.to(DEV), b.to(DEV), out=out) is out
        assert torch.equal(out.cpu(), ref)


def test_mismatched_shapes_raise_the_base_s_error(modules):
    cond, a, b = _t(4, 6) > 0, _t(4, 6), _t(4, 5)
    texts = []
    for m in modules.values():
        with pytest.raises(RuntimeError) as raised:
            m.where_self_out(cond.to(DEV), a.to(DEV), b.to(DEV))
        texts.append(str(raised.value))
    assert texts[0] == texts[1]


def test_only_equal_shapes_skip_broadcast_shapes(modules, monkeypatch):
    calls = []
    stock = torch.broadcast_shapes
    monkeypatch.setattr(
        torch, "broadcast_shapes", lambda *s: calls.append(s) or stock(*s)
    )
    cond, a, b = CASES["equal"]()
    modules["patched"].where_self_out(cond.to(DEV), a.to(DEV), b.to(DEV))
    assert calls == []
    modules["base"].where_self_out(cond.to(DEV), a.to(DEV), b.to(DEV))
    assert len(calls) == 1  # the pre-image pays for it: the patch is what skips it
    cond, a, b = CASES["broadcast"]()
    modules["patched"].where_self_out(cond.to(DEV), a.to(DEV), b.to(DEV))
    assert calls[1:] == [((4, 1), (4, 6), (6,))]


def test_before_column_runs_the_base_where():
    """copyfix.measure.base_twins swaps the patched op module's functions for the
    pre-image's (whose pointwise function gets a base twin), so "before" times the
    base's where, not PR 6's."""
    twins = base_twins.base_twins(base_twins.GENERIC)
    swapped = {attr: v for (m, attr), v in twins.items() if m is PATCHED}
    assert "where_self_out" in swapped
    base_fn = swapped["where_self_out"]
    assert base_fn.__module__ != PATCHED.__name__
    assert "broadcast_shapes(c.shape" in open(base_fn.__code__.co_filename).read()
    base_module = importlib.import_module(base_fn.__module__)
    inner = [
        v for (m, a), v in twins.items() if m is base_module and a == "where_inner"
    ]
    assert inner and type(inner[0]).__module__ != type(PATCHED.where_inner).__module__
