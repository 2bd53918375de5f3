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
    copy_template,
    fallback_reason,
    strided_copy_,
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
    # src copied into a clone of template, as aten::copy does
    return copy_(copy_template(template), src, non_blocking=bool(non_blocking))


def copy_(dst: torch.Tensor, src: torch.Tensor, non_blocking: bool = False):
    if not isinstance(src, torch.Tensor):
        src = wrapped_number(src, dst)

    # this is the same as PyTorch's check
    if dst._is_zerotensor():
        raise RuntimeError(
            "ZeroTensors are immutable. Please materialize the tensor using "
            "`.clone()`, if you want a mutable zero tensor."
        )
    if src._is_zerotensor():
        return dst.zero_()

    if dst.layout != torch.strided or src.layout != torch.strided:
        # (direct calls only: dispatch picks the layout's kernel before this one)
        return torch.ops.aten.copy_.default(dst, src, non_blocking)

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
        return dst

    reason = fallback_reason(dst, src)
    if reason is not None:
        logger.debug("GEMS_KUNLUNXIN COPY_ falls back to aten: %s", reason)
        return torch.ops.aten.copy_.default.redispatch(
            _FALLBACK_KEYSET, dst, src, non_blocking
        )

    logger.debug("GEMS_KUNLUNXIN COPY_")
    return strided_copy_(dst, src, aliases)
