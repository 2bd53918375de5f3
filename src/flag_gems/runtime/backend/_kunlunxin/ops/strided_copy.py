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

"""copy_ and _to_copy through the backend's pointwise_dynamic kernels.

The KunlunXIN native copy_ runs only flat loops (same shape; both contiguous, or
both dense with the same strides): a strided copy that reaches it fails with
"invalid device function". copy.py sends its copies here, with real strides, and
to.py takes its conversions from here. This module keeps torch's semantics: its
errors before anything is written, conversions as torch makes them, negated
views, aliasing views read whole before the write.
"""

import dataclasses
import logging
from typing import Optional

import torch
import triton
import triton.language as tl

from flag_gems.runtime import device
from flag_gems.utils.shape_utils import (
    MemOverlap,
    can_use_int32_index,
    has_internal_overlapping,
)

from ..utils.codegen_config_utils import CodeGenConfig
from ..utils.pointwise_dynamic import pointwise_dynamic

logger = logging.getLogger(__name__)

# Dtypes Triton on KunlunXIN loads and stores (fp64 only where the backend
# descriptor enables it); complex, quantized and fp8 copies go to aten.
_TRITON_DTYPES = {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32}
_TRITON_DTYPES |= {torch.int64, torch.float16, torch.bfloat16, torch.float32}
if device.support_fp64:
    _TRITON_DTYPES.add(torch.float64)

_dense = torch.ops.aten.is_non_overlapping_and_dense

config_ = CodeGenConfig(
    512,
    (65536, 65536, 65536),
    32,
    True,
    prefer_1d_tile=True,
    is_scatter_slice=True,
)


@pointwise_dynamic(
    is_tensor=(True,), promotion_methods=[(0, "DEFAULT")], config=config_
)
@triton.jit
def copy_slice(src):
    return src


@pointwise_dynamic(is_tensor=[True], promotion_methods=[(0, "DEFAULT")])
@triton.jit
def _copy_kernel(src):
    return src


# Conversions where a Triton store differs from torch, for copy_ and _to_copy
# (conversion_kernel). Like copy_slice, they run with the scatter-slice config,
# which also serves strided layouts, with the XPU interleave pass off, as
# upstream's _to_copy runs its bfloat16 conversions.
conversion_config = dataclasses.replace(config_, isCloseInterleave=True)


# A store into bool goes through int8 (0.5 -> False); torch's bool is `!= 0`.
@pointwise_dynamic(
    is_tensor=[True], promotion_methods=[(0, "ALWAYS_BOOL")], config=conversion_config
)
@triton.jit
def _to_bool_kernel(src):
    return src != 0


# torch converts an integer, a float16 or a float64 to bfloat16 through float32
# (an integer or a float64 is rounded twice); Triton rounds once, and the XPU
# toolchain cannot compile int16/int32 -> bf16 or fp16 -> bf16. Round the float32
# bits to nearest even by hand (NaN: torch's 0x7FC0).
@pointwise_dynamic(
    is_tensor=[True], promotion_methods=[(0, "DEFAULT")], config=conversion_config
)
@triton.jit
def _to_bf16_kernel(src):
    x = src.to(tl.float32)
    bits = tl.where(x != x, 0x7FC00000, x.to(tl.uint32, bitcast=True))
    bits += 0x7FFF + ((bits >> 16) & 1)
    return (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)


# torch converts a float to uint8 through int64 (-1.5 -> -1 -> 255); a direct
# float -> unsigned conversion saturates.
@pointwise_dynamic(
    is_tensor=[True], promotion_methods=[(0, "DEFAULT")], config=conversion_config
)
@triton.jit
def _float_to_uint8_kernel(src):
    return src.to(tl.int64)


# torch converts float64 to float16 through float32 (two roundings); a store
# rounds once.
@pointwise_dynamic(
    is_tensor=[True], promotion_methods=[(0, "DEFAULT")], config=conversion_config
)
@triton.jit
def _through_fp32_kernel(src):
    return src.to(tl.float32)


# A negated view (lazy neg bit) is negated in dst's dtype after the conversion,
# as torch does (int8 -128 copied negated into int32 is 128). A float's sign
# bit is flipped, as torch's neg does for 0.0 and NaN (Triton's -x is 0 - x).
@pointwise_dynamic(is_tensor=[True], promotion_methods=[(0, "DEFAULT")], config=config_)
@triton.jit
def _negate_kernel(src):
    if src.dtype.is_fp64():
        sign = src.to(tl.int64, bitcast=True) ^ -9223372036854775808
        return sign.to(tl.float64, bitcast=True)
    elif src.dtype.is_fp32():
        return (src.to(tl.int32, bitcast=True) ^ -2147483648).to(
            tl.float32, bitcast=True
        )
    elif src.dtype.is_fp16() or src.dtype.is_bf16():
        sign = (src.to(tl.int16, bitcast=True) ^ -32768).to(tl.int16)
        return sign.to(src.dtype, bitcast=True)
    else:
        return -src


def conversion_kernel(src: torch.dtype, dst: torch.dtype):
    """The kernel that converts src to dst as torch does where a Triton store
    would not (copy_ and _to_copy alike); None where the store does."""
    if src is dst:
        return None
    if dst is torch.bool:
        return _to_bool_kernel
    integer = not (src.is_floating_point or src is torch.bool)
    if dst is torch.bfloat16 and (integer or src in (torch.float16, torch.float64)):
        return _to_bf16_kernel
    if dst is torch.uint8 and src.is_floating_point:
        return _float_to_uint8_kernel
    if dst is torch.float16 and src is torch.float64:
        return _through_fp32_kernel
    return None


def _kernel_for(dst: torch.Tensor, src: torch.Tensor):
    kernel = conversion_kernel(src.dtype, dst.dtype)
    if kernel is not None:
        return kernel
    if dst.is_contiguous() and src.is_contiguous():
        return _copy_kernel
    return copy_slice


def fallback_reason(dst: torch.Tensor, src: torch.Tensor) -> Optional[str]:
    """Why Triton on KunlunXIN cannot run this copy; None when it can."""
    if dst.dtype not in _TRITON_DTYPES or src.dtype not in _TRITON_DTYPES:
        if dst.is_quantized or src.is_quantized:
            return "quantized tensor"
        return f"dtype {src.dtype} -> {dst.dtype}"
    if dst.device != src.device or dst.is_meta:
        return "cross-device or meta copy"
    if dst.dtype is torch.bool and src.is_neg() != dst.is_neg():
        return "negation into bool (aten raises for it)"
    if not (can_use_int32_index(dst) and can_use_int32_index(src)):
        return "offsets past int32"
    return None


def runs_flat(dst: torch.Tensor, src: torch.Tensor) -> bool:
    """Whether the native copy runs this copy of two strided tensors: as one flat
    loop (same shape; both contiguous, or both dense with the same strides)."""
    contiguous = dst.is_contiguous()
    if contiguous != src.is_contiguous() or dst.shape != src.shape:
        return False
    # (density follows from shape and strides: equal for equal strides)
    return contiguous or (dst.stride() == src.stride() and _dense(dst))


def wrapped_number(value, dst: torch.Tensor) -> torch.Tensor:
    """`Tensor.copy_(3.7)` hands a Python kernel the number itself. Convert it on
    the host from float64, complex128, int64 or bool as aten does, and broadcast
    it on dst's device."""
    if not isinstance(value, (bool, int, float, complex)):
        raise TypeError(
            f"copy_(): argument 'src' must be Tensor, not {type(value).__name__}"
        )
    wide = {float: torch.float64, complex: torch.complex128}.get(type(value))
    src = torch.tensor(value, dtype=wide)
    if src.is_complex() or dst.dtype not in _TRITON_DTYPES:
        return src  # (the fallback converts it)
    return src.to(dst.dtype).to(dst.device)


def _span(t: torch.Tensor):
    """Bytes from t's first element to the end of its last (t non-empty)."""
    last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


def _must_read_src_first(dst: torch.Tensor, src: torch.Tensor) -> bool:
    """For aliasing dst and src: raise torch's partial-overlap error, or tell
    whether src must be read whole before dst is written.

    As at::assert_no_partial_overlap, only dense views are classified; other
    overlapping views do not raise in torch either, and get a snapshot here.
    """
    if dst.numel() == 0 or src.numel() == 0:
        return False
    (d0, d1), (s0, s1) = _span(dst), _span(src)
    if _dense(dst) and _dense(src):
        if (d0, d1) != (s0, s1) or dst.stride() != src.stride():
            if d0 < s1 and s0 < d1:
                raise RuntimeError(
                    "unsupported operation: some elements of the input tensor and the "
                    "written-to tensor refer to a single memory location. Please "
                    "clone() the tensor before performing the operation."
                )
        return False
    return d0 < s1 and s0 < d1


def expand_checked(
    dst: torch.Tensor, src: torch.Tensor, aliases: bool = False
) -> torch.Tensor:
    """src broadcast to dst's shape, after torch's errors in TensorIterator's
    order (internal overlap, partial overlap, broadcast), before any write. An
    aliasing src that must be read whole first comes back as a snapshot."""
    # (an empty tensor is contiguous: no element, no overlap, as in torch)
    if not dst.is_contiguous() and has_internal_overlapping(dst) == MemOverlap.Yes:
        raise RuntimeError(
            "unsupported operation: more than one element of the written-to tensor "
            "refers to a single memory location. Please clone() the tensor before "
            "performing the operation."
        )
    read_first = aliases and _must_read_src_first(dst, src)
    if src.shape != dst.shape:
        shape = torch._C._infer_size(dst.shape, src.shape)
        if shape != dst.shape:
            raise RuntimeError(
                f"output with shape {list(dst.shape)} doesn't match the broadcast "
                f"shape {list(shape)}"
            )
        src = src.expand(shape)
    if read_first:
        snapshot = torch.empty(dst.shape, dtype=src.dtype, device=src.device)
        _launch(copy_slice, snapshot, src)
        return snapshot
    return src


def copy_expanded(dst: torch.Tensor, src: torch.Tensor, negate: bool) -> torch.Tensor:
    """Write src (dst's shape, from expand_checked) into dst; negate: src's neg
    bit differs from dst's."""
    if dst.numel() == 0:
        return dst
    if src.dtype is torch.int32 and dst.dtype is torch.float16:
        # The XPU toolchain cannot compile int32 -> fp16; torch converts through
        # float32 too (exact below 2**24, and fp16 overflows above 65519).
        wide = torch.empty(dst.shape, dtype=torch.float32, device=dst.device)
        _launch(copy_slice, wide, src)
        src = wide
    _launch(_kernel_for(dst, src), dst, src)
    if negate:
        _launch(_negate_kernel, dst, dst)
    return dst


def triton_copy_(dst: torch.Tensor, src: torch.Tensor) -> Optional[torch.Tensor]:
    """dst.copy_(src) for two strided tensors, torch's errors first; None, with
    nothing done, when Triton on KunlunXIN cannot run it (fallback_reason): the
    caller's native fallback takes it then."""
    if dst._is_zerotensor():  # (torch's check)
        raise RuntimeError(
            "ZeroTensors are immutable. Please materialize the tensor using "
            "`.clone()`, if you want a mutable zero tensor."
        )
    if src._is_zerotensor():
        return dst.zero_()
    aliases = torch._C._is_alias_of(dst, src)
    if aliases and (
        dst.storage_offset() == src.storage_offset()
        and dst.stride() == src.stride()
        and dst.size() == src.size()
        and dst.dtype == src.dtype
        and dst.device == src.device
        and dst.is_conj() == src.is_conj()
        and dst.is_neg() == src.is_neg()
    ):
        return dst  # (src is dst: torch returns before any check)
    reason = fallback_reason(dst, src)
    if reason is not None:
        logger.debug("GEMS_KUNLUNXIN COPY_ falls back to aten: %s", reason)
        return None
    expanded = expand_checked(dst, src, aliases)
    return copy_expanded(dst, expanded, src.is_neg() != dst.is_neg())


def _launch(kernel, dst: torch.Tensor, src: torch.Tensor) -> None:
    """Run kernel(src) into dst (same shape), with their real strides."""
    kernel.instantiate(dst.ndim)(src, out0=dst)
