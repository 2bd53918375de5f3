"""The emulation's one mode, as :func:`copyfix.emulation.activate` set it (it alone
writes these and reads the environment they come from)."""

from __future__ import annotations

MODES = ("cpu", "cuda", "native")  # native: a real KunlunXIN XPU, nothing patched
ENV_MODE = "COPYFIX_EMULATION"
# The cpu emulation's FlagGems backend: kunlunxin (the default) or nvidia (the
# generic pointwise_dynamic codegen on the same interpreter).
CPU_VENDORS = ("kunlunxin", "nvidia")
ENV_CPU_VENDOR = "COPYFIX_CPU_VENDOR"

MODE: str | None = None  # the active mode (a MODES entry); None before activate()
CPU_VENDOR: str | None = None  # the cpu emulation's backend (a CPU_VENDORS entry)
GEMS_VENDOR: str | None = None  # FlagGems' backend ($GEMS_VENDOR once activated)
BASE: str | None = None  # the FlagGems base activate() found (a FLAGGEMS_BASES key)


def require(*modes: str) -> str:
    """The active mode; raises unless activate() ran (and, given modes, picked one)."""
    if MODE is None:
        raise RuntimeError(
            "call copyfix.emulation.activate() first (before importing flag_gems)"
        )
    if modes and MODE not in modes:
        raise RuntimeError(
            f"not available in {MODE!r} mode (only in {', '.join(modes)})"
        )
    return MODE


def patch(owner, name):
    """Decorator: ``owner.name = make(stock)``, once (marked, with ``__wrapped__``)."""

    def install(make):
        stock = getattr(owner, name)
        if getattr(stock, "_copyfix_patched", False):
            return stock
        new = make(stock)
        new._copyfix_patched = True
        new.__wrapped__ = stock
        setattr(owner, name, new)
        return new

    return install


def register_kernel(lib, op: str, fn, key: str) -> None:
    """``lib.impl(op, fn, key)`` over any Python kernel already there for aten::op on
    key: torch 2.11's Library.impl refuses a second one listed in
    ``torch.library._impls`` (2.13 allows it), so this entry is kept out of that set;
    an entry already there stays, and destroying ``lib`` leaves it alone."""
    import torch

    impls = torch.library._impls
    name = f"aten/{op}/{key}"
    held = name in impls
    impls.discard(name)
    try:
        lib.impl(op, fn, key)
    finally:
        if not held:
            impls.discard(name)
        lib._op_impls.discard(name)
