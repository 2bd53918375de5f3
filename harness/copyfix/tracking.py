"""Count what a kunlunxin copy_ call did: Triton launches (with their rank) and aten fallbacks."""

import contextlib
import sys
from dataclasses import dataclass, field
from unittest import mock

import torch

OP_KERNELS = tuple(  # the op's pointwise_dynamic kernels (since 0b98bf2)
    "_copy_kernel copy_slice _to_bool_kernel _to_bf16_kernel _float_to_uint8_kernel "
    "_negate_kernel _through_fp32_kernel".split()
)
# ... and one only the generic op (src/flag_gems/ops/copy.py) has
KERNELS = OP_KERNELS + ("_int_to_bf16_kernel",)


# The op's kernels and Triton path live in a module of their own, which both
# integrations of copy.py (the fork's full file, the patch of upstream's head file)
# call; upstream's base files hold their own.
STRIDED_COPY_MODULE = "_kunlunxin.ops.strided_copy"


def kernel_home(module):
    """The module holding `module`'s pointwise_dynamic kernels and Triton-path helpers."""
    if hasattr(module, "_negate_kernel") or hasattr(module, "_copy_kernel"):
        return module
    return sys.modules.get(STRIDED_COPY_MODULE, module)


@dataclass
class Paths:
    launches: list = field(default_factory=list)  # one (kernel name, rank) per launch
    fallbacks: int = 0

    @property
    def ranks(self) -> list:
        return [rank for _, rank in self.launches]

    def describe(self) -> str:
        kernel = f"Triton kernel x{len(self.ranks)} (rank {self.ranks})"
        fallback = f"aten fallback x{self.fallbacks}"
        parts = [kernel] * bool(self.ranks) + [fallback] * bool(self.fallbacks)
        return ", ".join(parts) or "no kernel, no fallback"


@contextlib.contextmanager
def track(module, kernels=None):
    """Spy on `module`'s pointwise_dynamic kernels and on aten::copy_'s redispatch:
    the kernels of :data:`KERNELS` the module has, or each of ``kernels`` (which must
    all be there)."""
    paths = Paths()
    op = torch.ops.aten.copy_.default
    redispatch = op.redispatch

    def counting(name, instantiate):
        def counted(rank):
            paths.launches.append((name, rank))
            return instantiate(rank)

        return counted

    def counting_redispatch(*args, **kwargs):
        paths.fallbacks += 1
        return redispatch(*args, **kwargs)

    home = kernel_home(module)
    names = kernels or [n for n in KERNELS if hasattr(home, n)]
    with contextlib.ExitStack() as stack:
        for name in names:
            kernel = getattr(home, name)
            counted = counting(name, kernel.instantiate)
            stack.enter_context(mock.patch.object(kernel, "instantiate", counted))
        stack.enter_context(mock.patch.object(op, "redispatch", counting_redispatch))
        yield paths
