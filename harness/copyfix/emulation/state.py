"""The emulation's one mode, as :func:`copyfix.emulation.activate` set it.

Only ``activate`` writes these (and only it reads the environment they come from);
every other module reads them here, or as ``copyfix.emulation.MODE`` & co.
"""

from __future__ import annotations

MODES = ("cpu", "cuda", "native")  # native: a real KunlunXIN XPU, nothing patched
ENV_MODE = "COPYFIX_EMULATION"
# The FlagGems backend the cpu emulation runs: kunlunxin (the default, what the
# emulation is for) or nvidia (FlagGems' default backend and its generic
# pointwise_dynamic codegen on the same interpreter: a check of the generic path).
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
