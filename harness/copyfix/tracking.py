"""Count what a kunlunxin copy_ call did: Triton launches (with their rank) and aten fallbacks."""

import contextlib
import sys
from dataclasses import dataclass, field
from unittest import mock

import torch

OP_KERNELS = (  # the op's pointwise_dynamic kernels (since 0b98bf2)
    "_copy_kernel",
    "copy_slice",
    "_to_bool_kernel",
    "_to_bf16_kernel",
    "_float_to_uint8_kernel",
    "_negate_kernel",
    "_through_fp32_kernel",
)
# ... and those of older ops (847c5a4, whose measurements bench can still repeat, and
# the op before the toolchain model: _int_to_bf16_kernel)
KERNELS = OP_KERNELS + (
    "_int_to_bf16_kernel",
    "_copy_to_bool_kernel",
    "_copy_int_to_bf16_kernel",
    "_copy_via_int64_kernel",
)


# The op's kernels and Triton path live in a module of their own, which both
# integrations of copy.py (the fork's full file, the patch of upstream's head file)
# call; older op files (bench's 847c5a4) and upstream's base files hold their own.
STRIDED_COPY_MODULE = "_kunlunxin.ops.strided_copy"


def kernel_home(module):
    """The module holding `module`'s pointwise_dynamic kernels and Triton-path helpers."""
    if hasattr(module, "_negate_kernel") or hasattr(module, "_copy_kernel"):
        return module
    return sys.modules.get(STRIDED_COPY_MODULE, module)


@dataclass
class Paths:
    ranks: list = field(default_factory=list)  # one entry per launch
    fallbacks: int = 0
    replays: int = 0  # launches that replayed a recorded launch (copy_'s fast path)

    def describe(self) -> str:
        replayed = f", {self.replays} fast" if self.replays else ""
        parts = (
            [f"Triton kernel x{len(self.ranks)} (rank {self.ranks}{replayed})"]
            if self.ranks
            else []
        )
        if self.fallbacks:
            parts.append(f"aten fallback x{self.fallbacks}")
        return ", ".join(parts) or "no kernel, no fallback"


class _CountedLaunches(dict):
    """copy_'s recorded launches (`_launches`), each replay counted with its rank."""

    def __init__(self, records, paths, kernels):
        super().__init__(records)
        self.paths, self.kernels = paths, kernels

    def get(self, key, default=None):
        launch = super().get(key, default)
        if launch is None:
            return launch
        runner, args, wrapper, *spans = launch
        rank = next(
            (n for k in self.kernels for n, w in k.overloads.items() if w is wrapper),
            None,
        )

        def counted_runner(*run_args):
            runner(*run_args)
            self.paths.ranks.append(rank)
            self.paths.replays += 1

        return (counted_runner, args, wrapper, *spans)


@contextlib.contextmanager
def track(module):
    """Spy on `module`'s pointwise_dynamic kernels, on its fast-launch replays (where
    it has them) and on aten::copy_'s redispatch."""
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

    home = kernel_home(module)
    kernels = [getattr(home, n) for n in KERNELS if hasattr(home, n)]
    with contextlib.ExitStack() as stack:
        records = getattr(module, "_launches", None)
        if isinstance(records, dict):
            counted = _CountedLaunches(records, paths, kernels)

            def keep_records():  # what was recorded meanwhile stays recorded
                records.clear()
                records.update(counted)

            stack.callback(keep_records)
            stack.enter_context(mock.patch.object(module, "_launches", counted))
        for kernel in kernels:
            stack.enter_context(
                mock.patch.object(kernel, "instantiate", counting(kernel.instantiate))
            )
        stack.enter_context(mock.patch.object(op, "redispatch", counting_redispatch))
        yield paths


@contextlib.contextmanager
def small_copies_through_triton(module=None):
    """The fork's copy.py with its small-copy shortcut off: every copy takes the
    Triton path, as before the shortcut, so that tests built on small tensors still
    run the kernels on contiguous same-dtype layouts.

    ``module`` is the copy module flag_gems dispatches to (default: the fork's,
    ``_kunlunxin.ops.copy``); a module without the shortcut is left as it is."""
    module = module or sys.modules.get("_kunlunxin.ops.copy")
    if module is None or not hasattr(module, "_SMALL_SAME_DTYPE_NUMEL"):
        yield
        return
    with mock.patch.object(module, "_SMALL_SAME_DTYPE_NUMEL", 0):
        yield
