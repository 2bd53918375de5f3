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

import logging
from typing import Optional

import torch
import triton
import triton.language as tl

from flag_gems.utils import pointwise_dynamic

logger = logging.getLogger(__name__)

_FALLBACK_KEYSET = torch._C.DispatchKeySet(
    torch._C.DispatchKey.CompositeExplicitAutograd
)

_FLOAT8_E8M0FNU = getattr(torch, "float8_e8m0fnu", None)


@pointwise_dynamic(is_tensor=[True], promotion_methods=[(0, "DEFAULT")])
@triton.jit
def _copy_kernel(src):
    return src


# A store converts src to dst's dtype. Where that conversion is not torch's,
# copy_ and _to_copy (ops/to.py) pick one of these kernels instead (kernel_for).


# torch: nonzero is True (0.5, -256 and NaN too); a store into bool goes through int8.
@pointwise_dynamic(is_tensor=[True], promotion_methods=[(0, "ALWAYS_BOOL")])
@triton.jit
def _to_bool_kernel(src):
    return src != 0


# torch: float -> int64 -> uint8 (-1.5 -> 255); a float -> uint8 store saturates.
@pointwise_dynamic(is_tensor=[True], promotion_methods=[(0, "DEFAULT")])
@triton.jit
def _float_to_uint8_kernel(src):
    return src.to(tl.int64)


# torch: int -> float32 -> bfloat16 (two roundings); Triton rounds once, and folds
# int -> float32 -> bfloat16 into that one rounding. Round the float32 bits by hand.
@pointwise_dynamic(is_tensor=[True], promotion_methods=[(0, "DEFAULT")])
@triton.jit
def _int_to_bf16_kernel(src):
    bits = src.to(tl.float32).to(tl.uint32, bitcast=True)
    bits += 0x7FFF + ((bits >> 16) & 1)
    return (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)


# torch: float64 -> float32 -> float16/bfloat16 (two roundings); Triton rounds once.
@pointwise_dynamic(is_tensor=[True], promotion_methods=[(0, "DEFAULT")])
@triton.jit
def _through_fp32_kernel(src):
    return src.to(tl.float32)


def _can_use_triton(dst: torch.Tensor, src: torch.Tensor) -> bool:
    if dst.layout != torch.strided or src.layout != torch.strided:
        return False
    if dst.device != src.device:
        return False
    if dst.is_quantized or src.is_quantized:
        return False
    if src.is_complex() or dst.is_complex():
        # Preserve PyTorch's behaviour of warning when casting complex to real
        # by forcing the redispatch path, which issues the warning internally.
        return False
    return triton_converts(src.dtype, dst.dtype)


def _is_float8(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point and dtype.itemsize == 1


def triton_converts(src_dtype: torch.dtype, dst_dtype: torch.dtype) -> bool:
    """Whether a kernel of kernel_for converts src_dtype to dst_dtype as torch
    does (copy_ and _to_copy use it; the other cases go to aten)."""
    if _FLOAT8_E8M0FNU is not None and _FLOAT8_E8M0FNU in (src_dtype, dst_dtype):
        # Triton does not support float8 yet, so defer to PyTorch which has a reference implementation.
        return False
    if src_dtype != dst_dtype and (_is_float8(src_dtype) or _is_float8(dst_dtype)):
        # Not Triton's conversions: it saturates where torch overflows to inf
        # (float8_e5m2) and cannot convert integers to or from float8.
        return False
    return True


def _expand_like(src: torch.Tensor, target_shape: torch.Size) -> torch.Tensor:
    if src.shape == target_shape:
        return src
    return src.expand(target_shape)


def kernel_for(dst: torch.Tensor, src: torch.Tensor):
    """The kernel that converts src to dst's dtype as torch does (copy_ and _to_copy)."""
    if dst.dtype == src.dtype:
        return _copy_kernel
    if dst.dtype == torch.bool:
        return _to_bool_kernel
    if dst.dtype == torch.uint8 and src.is_floating_point():
        return _float_to_uint8_kernel
    if dst.dtype == torch.bfloat16 and not src.is_floating_point():
        return _int_to_bf16_kernel
    if dst.dtype in (torch.float16, torch.bfloat16) and src.dtype == torch.float64:
        return _through_fp32_kernel
    return _copy_kernel


def copy(
    template: torch.Tensor, src: torch.Tensor, *, non_blocking: Optional[bool] = False
):
    logger.debug("GEMS COPY (functional)")
    out = torch.empty_strided(
        template.size(), template.stride(), dtype=template.dtype, device=template.device
    )
    copy_(out, src, non_blocking=bool(non_blocking))
    return out


def copy_(dst: torch.Tensor, src: torch.Tensor, non_blocking: bool = False):
    if isinstance(src, (int, float, bool)):
        src = torch.tensor(src, device=dst.device)
    elif not isinstance(src, torch.Tensor):
        raise TypeError("unsupport src type for copy_: ", type(src))

    # this is the same as PyTorch's check
    if dst._is_zerotensor():
        raise RuntimeError("ZeroTensors are immutable. Call clone() before copy_.")
    if src._is_zerotensor():
        return dst.zero_()

    if torch._C._is_alias_of(dst, src):
        # Align with PyTorch: if metadata fully matches, this is a no-op.
        if (
            dst.storage_offset() == src.storage_offset()
            and dst.stride() == src.stride()
            and dst.size() == src.size()
            and dst.dtype == src.dtype
            and dst.device == src.device
            and dst.is_conj() == src.is_conj()
            and dst.is_neg() == src.is_neg()
        ):
            return dst
        # Otherwise defer to PyTorch for well-defined semantics on overlapping writes.
        return torch.ops.aten.copy_.default.redispatch(
            _FALLBACK_KEYSET, dst, src, non_blocking
        )

    if _FLOAT8_E8M0FNU is not None and (
        src.dtype == _FLOAT8_E8M0FNU or dst.dtype == _FLOAT8_E8M0FNU
    ):
        return torch.ops.aten.copy_.default.redispatch(
            _FALLBACK_KEYSET, dst, src, non_blocking
        )

    if src.numel() > 2**31 - 1 or dst.numel() > 2**31 - 1:
        return torch.ops.aten.copy_.default.redispatch(
            _FALLBACK_KEYSET, dst, src, non_blocking
        )

    if not _can_use_triton(dst, src):
        return torch.ops.aten.copy_.default.redispatch(
            _FALLBACK_KEYSET, dst, src, non_blocking
        )

    if dst.numel() == 0:
        # Respect PyTorch behaviour: empty tensors should still validate broadcast.
        return torch.ops.aten.copy_.default.redispatch(
            _FALLBACK_KEYSET, dst, src, non_blocking
        )

    logger.debug("GEMS COPY_")

    try:
        broadcast_shape = torch.broadcast_shapes(dst.shape, src.shape)
    except RuntimeError as exc:
        raise RuntimeError(str(exc)) from exc

    if torch.Size(broadcast_shape) != dst.shape:
        raise RuntimeError(
            f"The broadcast shape {broadcast_shape} does not match destination shape {tuple(dst.shape)}"
        )

    expanded_src = _expand_like(src, dst.shape)

    overload = kernel_for(dst, expanded_src).instantiate(expanded_src.ndim)
    overload(expanded_src, out0=dst)
    return dst
