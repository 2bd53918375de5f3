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

import dataclasses
import logging
import os
from typing import Optional

import torch
import triton

from ..utils.codegen_config_utils import get_codegen_config
from ..utils.pointwise_dynamic import pointwise_dynamic
from .strided_copy import conversion_kernel

logger = logging.getLogger(__name__)

_FALLBACK_KEYSET = torch._C.DispatchKeySet(
    torch._C.DispatchKey.CompositeExplicitAutograd
)

_FLOAT8_E8M0FNU = getattr(torch, "float8_e8m0fnu", None)

# a bfloat16 source: the backend's codegen config with the XPU interleave pass off.
close_interleave_config = dataclasses.replace(
    get_codegen_config(), isCloseInterleave=True
)


@pointwise_dynamic(is_tensor=[True], promotion_methods=[(0, "DEFAULT")])
@triton.jit
def _to_copy_func(x):
    return x


@pointwise_dynamic(
    is_tensor=[True],
    promotion_methods=[(0, "DEFAULT")],
    config=close_interleave_config,
)
@triton.jit
def _to_copy_func_close_interleave(x):
    return x


def _is_float8(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point and dtype.itemsize == 1


def _use_aten(src_dtype: torch.dtype, dst_dtype: torch.dtype) -> bool:
    if src_dtype.is_complex or dst_dtype.is_complex:
        return True  # Triton on kunlunxin has no complex dtypes
    if _FLOAT8_E8M0FNU is not None and _FLOAT8_E8M0FNU in (src_dtype, dst_dtype):
        return True  # Triton has no float8_e8m0fnu
    # Triton saturates where torch overflows to inf (float8_e5m2), and cannot
    # convert integers to or from float8.
    return src_dtype != dst_dtype and (_is_float8(src_dtype) or _is_float8(dst_dtype))


def _kernel_for(src_dtype: torch.dtype, dst_dtype: torch.dtype):
    """The kernel that converts src_dtype to dst_dtype as torch does: copy_'s
    conversion kernels where a store would not, else a plain store (float32 ->
    bfloat16 keeps the hardware store)."""
    kernel = conversion_kernel(src_dtype, dst_dtype)
    if kernel is not None:
        return kernel
    if src_dtype == torch.bfloat16:
        return _to_copy_func_close_interleave
    return _to_copy_func


def _is_host_or_transfer(x: torch.Tensor, device: torch.device) -> bool:
    # Host tensors and copies between devices (h2d, d2h, d2d) are PyTorch's.
    return device != x.device or x.device.type == "cpu"


def _empty_out(x: torch.Tensor, dtype, memory_format) -> torch.Tensor:
    if memory_format is torch.preserve_format and (
        x.is_contiguous()  # (dense, and much cheaper to ask than the aten op)
        or torch.ops.aten.is_non_overlapping_and_dense(x)
    ):
        # as torch: a dense layout is kept stride for stride
        return torch.empty_strided(x.size(), x.stride(), dtype=dtype, device=x.device)
    # otherwise torch's suggestion (preserve_format) or the asked-for format
    return torch.empty_like(x, dtype=dtype, memory_format=memory_format)


def _resolve_dtype(x: torch.Tensor, dtype: Optional[torch.dtype]) -> torch.dtype:
    if dtype is None:
        return x.dtype
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"Unsupported dtype argument type: {type(dtype)!r}")
    return dtype


# aten::_to_copy: every argument after the tensor is keyword-only, as in its schema
def to_copy(
    x,
    *,
    dtype=None,
    layout=None,
    device=None,
    pin_memory=None,
    non_blocking=False,
    memory_format=None,
):
    # Only dense strided tensors are implemented.
    if (layout is not None and layout != torch.strided) or x.layout != torch.strided:
        raise NotImplementedError(
            "FlagGems to_copy currently supports strided tensors only."
        )
    if pin_memory is not None:
        raise NotImplementedError(
            "FlagGems to_copy does not yet support pin_memory=True."
        )
    if x.is_quantized:
        raise NotImplementedError(
            "Quantized tensors are not supported in FlagGems to_copy yet."
        )

    dtype = _resolve_dtype(x, dtype)
    device = x.device if device is None else torch.device(device)
    if memory_format is None:
        memory_format = torch.preserve_format

    if _use_aten(x.dtype, dtype) or _is_host_or_transfer(x, device):
        return torch.ops.aten._to_copy.default.redispatch(
            _FALLBACK_KEYSET,
            x,
            dtype=dtype,
            layout=layout,
            device=device,
            pin_memory=pin_memory,
            non_blocking=non_blocking,
            memory_format=memory_format,
        )

    logger.debug("GEMS_KUNLUNXIN TO_COPY")
    out = _empty_out(x, dtype, memory_format)
    if x.dtype == torch.int32 and dtype == torch.float16:
        # The XPU toolchain cannot compile int32 -> fp16; torch converts through
        # float32 too (exact below 2**24, and fp16 overflows above 65519).
        wide = torch.empty_strided(
            out.size(), out.stride(), dtype=torch.float32, device=out.device
        )
        x = _to_copy_func(x, out0=wide)
    kernel = _kernel_for(x.dtype, dtype)
    # The XPU compiler reads these from the environment when it compiles (no
    # CodeGenConfig field or launch option carries them): the fast f32 -> bf16
    # store, and the local-memory element size. The caller's values come back.
    settings = {"TRITONXPU_BF16_FAST": "1"}
    if out.element_size() == 8:
        settings["TRITONXPU_ELEMBYTES"] = "8"
    previous = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        return kernel(x, out0=out)
    finally:
        for name, value in previous.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value
