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

"""copy_ with strided sources and destinations (expand, transpose, slices, permutes).

In a FlagGems checkout these run on benchmark/base.py like every op benchmark.
Elsewhere (no base.py) a small stand-in times aten and flag_gems with
triton.testing.do_bench, so the file still runs. Each layout builder returns
(dst, src) with about side**2 elements.
"""

from typing import Generator

import pytest
import torch
import triton

import flag_gems

try:
    from . import base, consts
except ImportError:  # not inside an upstream FlagGems checkout
    base = consts = None


def _rand(shape, dtype, device):
    return torch.randn(shape, device=device).to(dtype)


def _empty(shape, dtype, device):
    return torch.empty(shape, dtype=dtype, device=device)


# name: (side, src dtype, dst dtype, device) -> (dst, src); side divisible by 8
STRIDED_LAYOUTS = {
    "contiguous": lambda n, sd, dd, dev: (
        _empty((n, n), dd, dev),
        _rand((n, n), sd, dev),
    ),
    "expand_row": lambda n, sd, dd, dev: (
        _empty((n, n), dd, dev),
        _rand((n,), sd, dev).expand(n, n),
    ),
    "sdpa_mask": lambda n, sd, dd, dev: (  # (B,1,1,S) -> (B,H,S,S)
        _empty((2, 8, n // 4, n // 4), dd, dev),
        _rand((2, 1, 1, n // 4), sd, dev).expand(2, 8, n // 4, n // 4),
    ),
    "transpose": lambda n, sd, dd, dev: (
        _empty((n, n), dd, dev),
        _rand((n, n), sd, dev).t(),
    ),
    "step_slice": lambda n, sd, dd, dev: (
        _empty((n, n), dd, dev),
        _rand((2 * n, 2 * n), sd, dev)[::2, ::2],
    ),
    "permute4d": lambda n, sd, dd, dev: (  # (B,S,H,D) -> (B,H,S,D)
        _empty((2, 8, n // 4, n // 4), dd, dev),
        _rand((2, n // 4, 8, n // 4), sd, dev).permute(0, 2, 1, 3),
    ),
    "composite": lambda n, sd, dd, dev: (  # transpose of a step slice
        _empty((n, n), dd, dev),
        _rand((n, 2 * n), sd, dev).t()[::2],
    ),
    "strided_dst": lambda n, sd, dd, dev: (
        _empty((n, n), dd, dev).t(),
        _rand((n, n), sd, dev),
    ),
}
CAST_LAYOUTS = ["expand_row", "sdpa_mask", "transpose"]
# (a CPU "device" only exists under an emulator such as Triton's interpreter)
SIDES = [256, 1024, 2048] if flag_gems.device != "cpu" else [16]


def _wall_ms(fn, reps=5):
    import time

    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return sorted(times)[reps // 2]


def strided_inputs(layouts, src_dtype, dst_dtype, device, sides=SIDES) -> Generator:
    for side in sides:
        for name in layouts:
            yield STRIDED_LAYOUTS[name](side, src_dtype, dst_dtype, device)


def _standalone_run(layouts, dtypes, cast):
    """Latency of aten vs flag_gems copy_ where benchmark/base.py is not available."""
    bench = triton.testing.do_bench if torch.cuda.is_available() else _wall_ms
    for dtype in dtypes:
        src_dtype = torch.float32 if cast else dtype
        for side in SIDES:
            for name in layouts:
                dst, src = STRIDED_LAYOUTS[name](
                    side, src_dtype, dtype, flag_gems.device
                )
                torch_ms = bench(lambda: dst.copy_(src))
                with flag_gems.use_gems(include=["copy_"]):
                    gems_ms = bench(lambda: dst.copy_(src))
                print(
                    f"copy_ {name:11s} side={side:5d} {src_dtype}->{dtype}: "
                    f"torch {torch_ms:.4f} ms, gems {gems_ms:.4f} ms, "
                    f"speedup {torch_ms / gems_ms:.2f}"
                )


if base is not None:

    class StridedCopyBenchmark(base.Benchmark):
        def __init__(self, *args, layouts, cast, **kwargs):
            super().__init__(*args, **kwargs)
            self.layouts, self.cast = layouts, cast

        def get_input_iter(self, dtype) -> Generator:
            src_dtype = torch.float32 if self.cast else dtype
            yield from strided_inputs(self.layouts, src_dtype, dtype, self.device)


@pytest.mark.copy_
@pytest.mark.parametrize("cast", [False, True], ids=["same_dtype", "from_fp32"])
def test_copy_strided(cast):
    layouts = CAST_LAYOUTS if cast else list(STRIDED_LAYOUTS)
    if base is None:
        dtypes = [torch.float16, torch.bfloat16, torch.float32]
        return _standalone_run(layouts, dtypes, cast)
    bench = StridedCopyBenchmark(
        op_name="copy_",
        torch_op=torch.ops.aten.copy_,
        dtypes=consts.FLOAT_DTYPES,
        is_inplace=True,
        layouts=layouts,
        cast=cast,
    )
    bench.run()
