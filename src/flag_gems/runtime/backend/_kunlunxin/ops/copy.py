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

from .strided_copy import (  # (copy_slice: contiguous.py imports it from here)
    copy_slice,
    triton_copy_,
    wrapped_number,
)

__all__ = ["copy", "copy_", "copy_slice"]

logger = logging.getLogger(__name__)

_FALLBACK_KEYSET = torch._C.DispatchKeySet(
    torch._C.DispatchKey.CompositeExplicitAutograd
)


def copy(
    template: torch.Tensor, src: torch.Tensor, *, non_blocking: Optional[bool] = False
):
    logger.debug("GEMS_KUNLUNXIN COPY")
    out = torch.empty_strided(
        template.size(), template.stride(), dtype=template.dtype, device=template.device
    )
    copy_(out, src, non_blocking=bool(non_blocking))
    return out


def copy_(dst: torch.Tensor, src: torch.Tensor, non_blocking: bool = False):
    if not isinstance(src, torch.Tensor):
        src = wrapped_number(src, dst)
    if dst.layout != torch.strided or src.layout != torch.strided:
        # (direct calls only: dispatch picks the layout's kernel before this one)
        return torch.ops.aten.copy_.default(dst, src, non_blocking)
    logger.debug("GEMS_KUNLUNXIN COPY_")
    out = triton_copy_(dst, src)
    if out is None:  # (Triton lacks the dtype or device: strided_copy.fallback_reason)
        return torch.ops.aten.copy_.default.redispatch(
            _FALLBACK_KEYSET, dst, src, non_blocking
        )
    return out
