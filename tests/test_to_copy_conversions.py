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

import pytest
import torch

import flag_gems

from . import accuracy_utils as utils

pytestmark = pytest.mark.skipif(
    flag_gems.vendor_name != "kunlunxin", reason="the KunlunXIN _to_copy"
)

LAYOUTS = {
    "contiguous": lambda t: t,
    "transpose": lambda t: torch.stack([t, t.flip(0)], 1).t(),
    "expand": lambda t: t.reshape(1, -1).expand(3, -1),
}

# float32 patterns where rounding into bfloat16 matters: ties (to even, down and
# up), just above a tie, the overflow threshold, subnormals, +-0, +-inf, NaNs.
FP32_BITS = [
    0x3F808000, 0x3F818000, 0xBF818000, 0x3F808001, 0x7F7F7FFF, 0x7F7F8000,
    0x7F7FFFFF, 0x00000001, 0x00408000, 0x80000000, 0x7F800000, 0xFF800000,
    0x7FC00000, 0x7F800001,
]  # fmt: skip
# integers that round twice on the way to bfloat16 (through float32)
INTS = [16842753, -16842753, 2**24 + 1, 257, -129, 32767, 255, 0, 2**31 - 1]
BF16_SOURCES = [torch.float32, torch.float16, torch.int32, torch.int64, torch.int16]
BF16_SOURCES += [torch.uint8, torch.bool]
if flag_gems.runtime.device.support_fp64:
    BF16_SOURCES.append(torch.float64)


def _bf16_inputs(dtype):
    fp32 = torch.tensor(
        [b - (1 << 32) if b >> 31 else b for b in FP32_BITS], dtype=torch.int32
    ).view(torch.float32)
    if dtype == torch.float32:
        return fp32
    if dtype.is_floating_point:  # every float16 is exact in float32
        ties = [1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 65504.0, 6e-08]
        return torch.cat([fp32.to(dtype), torch.tensor(ties, dtype=dtype)])
    if dtype == torch.bool:
        return torch.tensor([True, False])
    info = torch.iinfo(dtype)
    return torch.tensor([v for v in INTS if info.min <= v <= info.max], dtype=dtype)


def _bits(t):
    # bit for bit, except that any NaN matches any NaN
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    if not t.is_floating_point():
        return t
    bits = t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    return torch.where(torch.isnan(t), torch.full_like(bits, -1), bits)


def _check(host_src, convert, layout="contiguous"):
    view = LAYOUTS[layout]
    ref = convert(view(host_src))  # torch, on the host
    src = view(host_src.to(flag_gems.device))
    with flag_gems.use_gems():
        res = convert(src)
    assert res.dtype == ref.dtype and res.stride() == ref.stride()
    utils.gems_assert_equal(_bits(res), utils.to_reference(_bits(ref).to(res.device)))


@pytest.mark.to_copy
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("src_dtype", BF16_SOURCES, ids=str)
def test_to_bfloat16(src_dtype, layout):
    _check(_bf16_inputs(src_dtype), lambda t: t.to(torch.bfloat16), layout)


REPORTED = {
    "bool": (torch.float32, [0.5, -0.25, 2.0, 1e-45, float("nan")], torch.Tensor.bool),
    "int16-bool": (torch.int16, [256, -256, 0, 1], torch.Tensor.bool),
    "uint8": (
        torch.float32,
        [-1.5, -3.0, 255.75, -128.75],
        lambda t: t.to(torch.uint8),
    ),
    "bfloat16": (torch.int32, [16842753], torch.Tensor.bfloat16),
}


@pytest.mark.to_copy
@pytest.mark.parametrize("case", list(REPORTED))
def test_reported_cases(case):
    src_dtype, values, convert = REPORTED[case]
    for layout in LAYOUTS:
        _check(torch.tensor(values, dtype=src_dtype), convert, layout)
