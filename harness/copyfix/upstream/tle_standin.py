"""A stand-in for TLE under upstream's own ``tle_copy`` rules (harness only).

Upstream's head ``_kunlunxin/utils/tle_copy.py`` decides in Python which copies it
takes, then launches one of three TLE kernels, which need triton-xpu's tile language
(upstream #6470).  :func:`standin` keeps every decision and replaces only the TLE parts:
``tle_dma_available()`` answers True, and the launch sites write ``src`` into ``dst``
on the host and count.  :func:`reach` counts, for a corpus of copies, which reach
``tle_copy`` through a given ``copy.py`` and which it takes (``copyfix.upstream.later``).
"""

from __future__ import annotations

import contextlib
import sys
from unittest import mock

TLE_MODULE = "_kunlunxin.utils.tle_copy"
COPY_MODULE = "_kunlunxin.ops.copy"


def _np(t):
    """A numpy view of t's memory (bool and bfloat16 through a same-width int)."""
    import torch

    width = {torch.bool: torch.uint8, torch.bfloat16: torch.int16}
    return (t.view(width[t.dtype]) if t.dtype in width else t).numpy()


def _host_write(src, dst, to_bool=False):
    """dst[...] = src as a copy would, without aten's strided copy."""
    import numpy as np
    import torch

    values = torch.from_numpy(np.ascontiguousarray(_np(src)))
    if src.dtype in (torch.bool, torch.bfloat16):
        values = values.view(src.dtype)
    if to_bool:
        values = values != 0
    elif values.dtype != dst.dtype:  # (aten's own flat conversion, not copy_ again)
        out = torch.empty(values.shape, dtype=dst.dtype)
        keyset = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)
        torch.ops.aten.copy_.default.redispatch(keyset, out, values)
        values = out
    _np(dst)[...] = _np(values)


class _RowKernel:
    """``_tle_dsa_row_copy_kernel[grid](src_v, dst_v, ..., TO_BOOL, **launch)``."""

    def __init__(self, taken):
        self.taken = taken

    def __getitem__(self, grid):
        def launch(src_v, dst_v, *args, **kwargs):
            self.taken.append("dsa-row")
            _host_write(src_v, dst_v, to_bool=bool(args[-1]))

        return launch


@contextlib.contextmanager
def standin():
    """Make the loaded ``tle_copy`` module take what its rules accept; yields the
    list of kernels it launched (one name per accepted copy)."""
    tle = sys.modules[TLE_MODULE]
    taken = []

    def tile_launch(src, dst, numel, dtype, block):
        taken.append("tile")
        _host_write(src, dst)

    def trans_launch(plan_key, build, src_v, dst_v):
        taken.append("dsa-transpose")
        _host_write(src_v, dst_v)

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(tle, "tle_dma_available", lambda: True))
        # (PR 1's head patch asks it from copy.py too, under the name it imported)
        copy_py = sys.modules.get(COPY_MODULE)
        if getattr(copy_py, "tle_dma_available", None) is not None:
            stack.enter_context(
                mock.patch.object(copy_py, "tle_dma_available", lambda: True)
            )
        stack.enter_context(mock.patch.object(tle, "_tile_launch", tile_launch))
        stack.enter_context(mock.patch.object(tle, "_trans_launch", trans_launch))
        stack.enter_context(
            mock.patch.object(tle, "_tle_dsa_row_copy_kernel", _RowKernel(taken))
        )
        stack.enter_context(mock.patch.dict(tle._TRANS_PLAN_CACHE, clear=True))
        yield taken


def corpus(torch):
    """name -> make(device) -> (dst, src): layouts x dtype pairs x sizes (under and
    over the head file's 2**14-element shortcut), aliasing and negated views."""
    gen = torch.Generator().manual_seed(1)
    layouts = {  # name: (the host tensor's shape, the view of it copied)
        "contiguous": (lambda n, m: (n, m), lambda t, n, m: t),
        "transpose": (lambda n, m: (m, n), lambda t, n, m: t.t()),
        "expand_row": (lambda n, m: (m,), lambda t, n, m: t.expand(n, m)),
        "step_slice": (lambda n, m: (2 * n, 2 * m), lambda t, n, m: t[::2, ::2]),
        "inner_slice": (lambda n, m: (n, m + 3), lambda t, n, m: t[:, 2:-1]),
        "dst_rows": (
            lambda n, m: (n, m),
            lambda t, n, m: t,
        ),  # (into every other column)
    }
    f32, bf16, i8, b8 = torch.float32, torch.bfloat16, torch.int8, torch.bool
    pairs = [(f32, f32), (bf16, bf16), (i8, i8), (b8, b8), (torch.int64, torch.int64)]
    pairs += [(f32, bf16), (f32, torch.int32), (torch.int16, f32), (torch.float16, b8)]
    cases = {}
    for size, (n, m) in {"small": (8, 16), "large": (128, 136)}.items():
        for name, (shape, view) in layouts.items():
            for sd, dd in pairs:
                host = (torch.randn(shape(n, m), generator=gen) * 50).to(sd)

                def make(device, host=host, view=view, name=name, dd=dd, n=n, m=m):
                    src = view(host.to(device), n, m)
                    if name == "dst_rows":
                        return torch.zeros(n, 2 * m, dtype=dd, device=device)[
                            :, ::2
                        ], src
                    return torch.zeros(n, m, dtype=dd, device=device), src

                cases[f"{size} {name} {sd}->{dd}".replace("torch.", "")] = make

    def aliasing(device):
        base = torch.arange(40000.0, device=device)
        return base[1::2], base[:-1:2]

    def negated(seed, view):
        def make(device):
            x = torch.randn(128, 136, generator=torch.Generator().manual_seed(seed))
            src = view(torch._neg_view(x.to(device)))
            return torch.zeros(src.shape, device=device), src

        return make

    cases["large aliasing b[1::2] <- b[:-1:2]"] = aliasing
    cases["large negated view, transposed"] = negated(2, lambda t: t.t())
    cases["large negated view, contiguous"] = negated(3, lambda t: t)
    return cases


def reach(copy_module, device) -> list[dict]:
    """For each corpus copy, under the stand-in: whether ``copy_module.copy_`` called
    tle_copy, what tle_copy took, and the outcome (no comparison: this counts)."""
    import torch

    import flag_gems

    real = copy_module.tle_copy
    records = []
    for name, make in corpus(torch).items():
        calls = []

        def counting(src, dst):
            taken_before = len(taken)
            ok = real(src, dst)
            calls.append(taken[taken_before] if ok else "declined")
            return ok

        dst, src = make(device)
        rec = {"case": name}
        with standin() as taken, mock.patch.object(copy_module, "tle_copy", counting):
            try:
                with flag_gems.use_gems(include=["copy_"]):
                    dst.copy_(src)
                rec["outcome"] = "ok"
            except Exception as exc:  # what the record notes
                rec["outcome"] = f"{type(exc).__name__}"
        rec["tle_copy"] = calls[0] if calls else "not reached"
        records.append(rec)
    return records


def summary(records) -> dict:
    reached = [r for r in records if r["tle_copy"] != "not reached"]
    taken = [r for r in reached if r["tle_copy"] != "declined"]
    return {"copies": len(records), "reach_tle_copy": len(reached), "taken": len(taken)}
