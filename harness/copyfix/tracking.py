"""Count what a kunlunxin copy_ call did: Triton launches (with their rank) and aten fallbacks."""

import contextlib
from dataclasses import dataclass, field
from unittest import mock

import torch

KERNELS = ("_copy_kernel", "_copy_to_bool_kernel")


@dataclass
class Paths:
    ranks: list = field(default_factory=list)  # one entry per launch
    fallbacks: int = 0

    def describe(self) -> str:
        parts = (
            [f"Triton kernel x{len(self.ranks)} (rank {self.ranks})"]
            if self.ranks
            else []
        )
        if self.fallbacks:
            parts.append(f"aten fallback x{self.fallbacks}")
        return ", ".join(parts) or "no kernel, no fallback"


@contextlib.contextmanager
def track(module):
    """Spy on `module`'s pointwise_dynamic kernels and on aten::copy_'s redispatch."""
    paths = Paths()
    op = torch.ops.aten.copy_.default
    redispatch = op.redispatch

    def counting(instantiate):
        def wrapper(rank):
            paths.ranks.append(rank)
            return instantiate(rank)

        return wrapper

    def counting_redispatch(*args, **kwargs):
        paths.fallbacks += 1
        return redispatch(*args, **kwargs)

    with contextlib.ExitStack() as stack:
        for name in KERNELS:
            kernel = getattr(module, name, None)
            if kernel is not None:
                stack.enter_context(
                    mock.patch.object(
                        kernel, "instantiate", counting(kernel.instantiate)
                    )
                )
        stack.enter_context(mock.patch.object(op, "redispatch", counting_redispatch))
        yield paths
