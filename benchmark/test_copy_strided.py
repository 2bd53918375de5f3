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

from typing import Generator

import pytest
import torch

import flag_gems

from . import base, consts, utils


# Each layout maps a side n to (dst, src) views of about n * n elements.
def _layouts(n, src_dtype, dst_dtype, device):
    def rand(*shape):
        return utils.generate_tensor_input(shape, src_dtype, device)

    def empty(*shape):
        return torch.empty(shape, dtype=dst_dtype, device=device)

    q = n // 4
    yield empty(n, n), rand(n).expand(n, n)  # broadcast row
    yield empty(2, 8, q, q), rand(2, 1, 1, q).expand(2, 8, q, q)  # SDPA mask
    yield empty(n, n), rand(n, n).t()  # transpose
    yield empty(n, n), rand(2 * n, 2 * n)[::2, ::2]  # step slice
    yield empty(2, 8, q, q), rand(2, q, 8, q).permute(0, 2, 1, 3)  # permute
    yield empty(n, n).t(), rand(n, n)  # strided destination


def _contiguous_copy(dst, src, dst_flat, src_flat):
    # The baseline: aten's copy between contiguous tensors of the same shape and
    # dtypes, a flat loop, which the XPU runs (its strided copy is what it lacks).
    # The speedup reads as the fraction of contiguous-copy speed.
    return dst_flat.copy_(src_flat)


def _strided_copy(dst, src, dst_flat, src_flat):
    return flag_gems.copy_(dst, src)


class StridedCopyBenchmark(base.Benchmark):
    DEFAULT_SHAPES = [(256, 256), (1024, 1024)]

    def __init__(self, *args, cast, **kwargs):
        super().__init__(*args, **kwargs)
        self.cast = cast

    def set_shapes(self, shape_file_path=None):
        # the sides of the layouts above, not the shape file's element shapes
        self.shapes = self.DEFAULT_SHAPES

    def get_input_iter(self, dtype) -> Generator:
        src_dtype = torch.float32 if self.cast else dtype
        for shape in self.shapes:
            for dst, src in _layouts(shape[-1], src_dtype, dtype, self.device):
                dst_flat = torch.empty(dst.shape, dtype=dtype, device=self.device)
                src_flat = torch.empty(dst.shape, dtype=src_dtype, device=self.device)
                yield dst, src, dst_flat, src_flat


@pytest.mark.copy_
@pytest.mark.parametrize("cast", [False, True], ids=["same_dtype", "from_fp32"])
def test_copy_strided(cast):
    bench = StridedCopyBenchmark(
        op_name="copy_",
        torch_op=_contiguous_copy,
        dtypes=consts.FLOAT_DTYPES,
        is_inplace=True,
        cast=cast,
    )
    bench.set_gems(_strided_copy)
    bench.run()
