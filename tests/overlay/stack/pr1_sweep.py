"""Run in a fresh process on a flag_gems with PR 1 alone (or none) by
tests/overlay/test_stack.py: every layout x dtype pair of the KunlunXIN copy_
tests, with the XPU fault on FlagGems' fallback. Prints one JSON line: per case,
"exact" (bit-exact against torch), "fault" (reached aten's missing strided copy),
"toolchain" (a conversion the XPU toolchain cannot compile) or "wrong"."""

import itertools
import json
import sys

import torch

from copyfix import accuracy_utils, emulation

emulation.activate("cpu")  # before flag_gems is imported
sys.modules.setdefault("tests.accuracy_utils", accuracy_utils)

import flag_gems  # noqa: E402
from tests import test_copy_ops as cases  # noqa: E402


def outcome(layout, src_dtype, dst_dtype):
    src_shape, src_view, dst_shape, dst_view = cases.LAYOUTS[layout]
    host_src = cases._host_values(src_shape, src_dtype)
    host_dst = torch.zeros(dst_shape, dtype=dst_dtype)
    dst_view(host_dst).copy_(src_view(host_src))
    dst = torch.zeros(dst_shape, dtype=dst_dtype, device=flag_gems.device)
    src = host_src.to(flag_gems.device)
    try:
        with emulation.xpu_fallback_failure():
            with flag_gems.use_gems(include=["copy_"]):
                dst_view(dst).copy_(src_view(src))
    except torch.AcceleratorError as exc:
        assert "invalid device function" in str(exc)
        return "fault"
    except Exception as exc:  # noqa: BLE001 - the toolchain model's compile error
        assert "ToolchainFault" in repr(exc), repr(exc)
        return "toolchain"
    same = torch.equal(cases._bits(dst.cpu()), cases._bits(host_dst))
    return "exact" if same else "wrong"


if __name__ == "__main__":
    pairs = [(t, t) for t in cases.SAME_DTYPES] + cases.CAST_PAIRS
    result = {
        f"{layout}:{cases._pair_id(pair)}": outcome(layout, *pair)
        for layout, pair in itertools.product(cases.LAYOUTS, pairs)
    }
    json.dump(result, sys.stdout)
