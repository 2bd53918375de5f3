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

import math

import pytest
import torch

import flag_gems

from . import accuracy_utils as utils

# The generic copy_ and _to_copy: a backend that dispatches its own op (from its
# runtime/backend/_<vendor>/ops) or switches them off skips these tests.
_BACKEND_OWN = {name for name, _ in flag_gems.runtime.backend.get_customized_ops()}
_BACKEND_OWN |= set(flag_gems.runtime.backend.get_unused_ops())
GENERIC_COPY_ = pytest.mark.skipif(
    bool({"copy_"} & _BACKEND_OWN), reason="the backend dispatches its own copy_"
)
GENERIC_TO_COPY = pytest.mark.skipif(
    bool({"to_copy", "_to_copy"} & _BACKEND_OWN),
    reason="the backend dispatches its own _to_copy",
)

DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
]
if flag_gems.runtime.device.support_fp64:
    DTYPES.append(torch.float64)

# Bit patterns: +-0, +-inf, NaNs, subnormals, min normal, +-max, and the values
# where rounding into a narrower float ties or overflows.
FLOAT_BITS = {
    torch.float16: [
        0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x0001, 0x03FF, 0x8001,
        0x0400, 0x7BFF, 0xFBFF, 0x3C04, 0x3C0C, 0xBC0C,
    ],
    torch.bfloat16: [
        0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x0001, 0x007F, 0x8001,
        0x0080, 0x7F7F, 0xFF7F, 0x477F, 0x4780, 0x3380, 0x3300,
    ],
    torch.float32: [
        0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
        0x00000001, 0x007FFFFF, 0x80000001, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF,
        0x3F808000, 0x3F818000, 0xBF818000, 0x3F808001, 0x7F7F7FFF, 0x7F7F8000,
        0x477FEFFF, 0x477FF000, 0x3F801000, 0x3F803000, 0x33000000, 0x33000001,
        0x33C00000,
    ],
    torch.float64: [
        0x0000000000000000, 0x8000000000000000, 0x7FF0000000000000,
        0xFFF0000000000000, 0x7FF8000000000000, 0xFFF8000000000000,
        0x0000000000000001, 0x8000000000000001, 0x0010000000000000,
        0x7FEFFFFFFFFFFFFF, 0x47EFFFFFF0000000, 0x36A0000000000000,
        0x3FF0020000000001, 0xBFF0020000000001, 0x3FF0100000000001,
        0x3FF00FFFFFFFFFFF, 0x40EFFDFFFFFFFFFF,
    ],
}  # fmt: skip
FLOAT_VALUES = [
    0.5, -0.25, 2.0, -1.5, -3.0, 2.75, -0.75, 127.5, -128.75, 255.75, 256.0,
    300.5, -1.0, 32767.5, -32768.5, 65504.0, 65536.0, 16777218.0, 2.0**31,
    -(2.0**31), 2.0**62, -(2.0**63),
]  # fmt: skip
INT_VALUES = [
    -(2**63), -(2**62) - 2**54 - 1, -(2**31), -16842753, -32768, -256, -129, -128,
    -1, 0, 1, 2, 127, 128, 255, 256, 257, 2049, 32767, 32768, 65520, 65535,
    16777217, 16842753, 2**31 - 1, 2**40 + 2**32 + 1, 2**62 + 2**54 + 1, 2**63 - 1,
]  # fmt: skip
STRIDED_PAIRS = [
    (torch.float32, torch.bool),
    (torch.int16, torch.bool),
    (torch.int32, torch.bfloat16),
    (torch.int64, torch.bfloat16),
    (torch.float32, torch.uint8),
]
if flag_gems.runtime.device.support_fp64:
    STRIDED_PAIRS += [(torch.float64, torch.float16), (torch.float64, torch.bfloat16)]
STRIDED_VIEWS = {
    "transpose": lambda t: torch.stack([t, t.flip(0)], 1).t(),
    "expand": lambda t: t.reshape(1, -1).expand(3, -1),
}
BITS_DTYPE = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def _from_bits(bits, dtype):
    width = torch.finfo(dtype).bits
    signed = [b - (1 << width) if b >> (width - 1) else b for b in bits]
    return torch.tensor(signed, dtype=BITS_DTYPE[width // 8]).view(dtype)


def _defined(value, dst_dtype):
    # torch leaves float -> integer undefined for NaN, inf and values out of range;
    # float -> uint8 goes through int64, float -> bool is `!= 0`.
    if dst_dtype.is_floating_point or dst_dtype == torch.bool:
        return True
    info = torch.iinfo(torch.int64 if dst_dtype == torch.uint8 else dst_dtype)
    return math.isfinite(value) and info.min <= math.trunc(value) <= info.max


def _edge_values(src_dtype, dst_dtype):
    if src_dtype == torch.bool:
        return torch.tensor([False, True, True, False])
    if not src_dtype.is_floating_point:
        info = torch.iinfo(src_dtype)
        return torch.tensor(
            [v for v in INT_VALUES if info.min <= v <= info.max], dtype=src_dtype
        )
    values = torch.cat(
        [
            _from_bits(FLOAT_BITS[src_dtype], src_dtype),
            torch.tensor(FLOAT_VALUES, dtype=torch.float64).to(src_dtype),
        ]
    )
    keep = [_defined(v, dst_dtype) for v in values.double().tolist()]
    return values[torch.tensor(keep)]


def _bits(t):
    # exact comparison: integer views (+-0 differ); any NaN matches any NaN, since
    # torch's own CPU and GPU conversions give different NaN payloads
    if t.dtype == torch.bool:
        return t.view(torch.uint8)
    if not t.is_floating_point():
        return t
    bits = t.view(BITS_DTYPE[t.element_size()])
    return torch.where(torch.isnan(t), torch.full_like(bits, -1), bits)


def _check_copy(host_src, dst_dtype, view=lambda t: t):
    # torch's copy on the host is the reference: a device without aten's strided
    # copy (KunlunXIN) cannot compute it there
    host_view = view(host_src)
    ref = torch.empty(host_view.shape, dtype=dst_dtype)
    ref.copy_(host_view)
    src = view(host_src.to(flag_gems.device))
    res = torch.empty(src.shape, dtype=dst_dtype, device=flag_gems.device)
    with flag_gems.use_gems():
        res.copy_(src)
    ref = utils.to_reference(_bits(ref).to(flag_gems.device))
    utils.gems_assert_equal(_bits(res), ref)


def _name(dtype):
    return str(dtype).replace("torch.", "")


# _to_copy (Tensor.to, .bool(), .half(), ...) converts with the same kernels as copy_.
def _check_to(host_src, dst_dtype, view=lambda t: t, method=None):
    ref = view(host_src).to(dst_dtype)  # torch on the host
    src = view(host_src.to(flag_gems.device))
    with flag_gems.use_gems():
        res = getattr(src, method)() if method else src.to(dst_dtype)
    assert res.dtype == dst_dtype and res.stride() == ref.stride()
    ref = utils.to_reference(_bits(ref).to(flag_gems.device))
    utils.gems_assert_equal(_bits(res), ref)


# Both ops take the same dtype pairs and layouts, each with its own marker and skip.
CHECKS = {"copy_": _check_copy, "to_copy": _check_to}
OPS = [
    pytest.param("copy_", marks=[pytest.mark.copy_, GENERIC_COPY_]),
    pytest.param("to_copy", marks=[pytest.mark.to_copy, GENERIC_TO_COPY]),
]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dst_dtype", DTYPES, ids=_name)
@pytest.mark.parametrize("src_dtype", DTYPES, ids=_name)
def test_dtype_conversion(src_dtype, dst_dtype, op):
    CHECKS[op](_edge_values(src_dtype, dst_dtype), dst_dtype)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("layout", list(STRIDED_VIEWS))
@pytest.mark.parametrize(
    "src_dtype, dst_dtype",
    STRIDED_PAIRS,
    ids=lambda d: _name(d) if isinstance(d, torch.dtype) else d,
)
def test_dtype_conversion_strided(src_dtype, dst_dtype, layout, op):
    CHECKS[op](_edge_values(src_dtype, dst_dtype), dst_dtype, STRIDED_VIEWS[layout])


@pytest.mark.copy_
@GENERIC_COPY_
@pytest.mark.parametrize(
    "src_dtype, values, dst_dtype",
    [
        (torch.float32, [0.5, -0.25, 0.0, 2.0, float("nan")], torch.bool),
        (torch.int16, [256, 0, -256, 1], torch.bool),
        (torch.int32, [16842753], torch.bfloat16),
        (torch.float32, [-1.5, -3.0], torch.uint8),
    ],
    ids=["float32-bool", "int16-bool", "int32-bfloat16", "float32-uint8"],
)
def test_copy_dtype_conversion_reported_cases(src_dtype, values, dst_dtype):
    _check_copy(torch.tensor(values, dtype=src_dtype), dst_dtype)


@pytest.mark.to_copy
@GENERIC_TO_COPY
@pytest.mark.parametrize(
    "src_dtype, values, dst_dtype, method",
    [
        (torch.float32, [0.5, -0.25, 2.0, 1e-45], torch.bool, "bool"),
        (torch.float32, [-1.5, -3.0], torch.uint8, None),
        (torch.int32, [16842753], torch.bfloat16, "bfloat16"),
        (torch.int64, [2049, 65520, 2**62 + 2**54 + 1], torch.float16, "half"),
        (torch.float16, [65504.0, -0.0, 6e-08], torch.float32, "float"),
    ],
    ids=["bool", "uint8", "int32-bfloat16", "int64-half", "half-float"],
)
def test_to_copy_dtype_conversion_reported_cases(src_dtype, values, dst_dtype, method):
    _check_to(torch.tensor(values, dtype=src_dtype), dst_dtype, method=method)
