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

# The kernels that convert as torch does, shared with copy_.
from flag_gems.ops.copy import _kernel_for, _triton_converts

logger = logging.getLogger(__name__)

_FALLBACK_KEYSET = torch._C.DispatchKeySet(
    torch._C.DispatchKey.CompositeExplicitAutograd
)


def _resolve_dtype(x: torch.Tensor, dtype: Optional[torch.dtype]) -> torch.dtype:
    if dtype is None:
        return x.dtype
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"Unsupported dtype argument type: {type(dtype)!r}")
    return dtype


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

    if (
        x.is_complex()
        or dtype.is_complex  # Triton has no complex dtypes
        or not _triton_converts(x.dtype, dtype)  # float8 conversions, e8m0fnu
        or _is_host_or_transfer(x, device)
    ):
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

    logger.debug("GEMS TO_COPY")
    out = _empty_out(x, dtype, memory_format)
    # the store alone converts differently from torch for some dtype pairs
    return _kernel_for(out, x)(x, out0=out)
