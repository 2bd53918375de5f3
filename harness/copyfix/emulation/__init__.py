"""Run FlagGems' KunlunXIN (``_kunlunxin``) code path without KunlunXIN hardware.

Modes: ``native`` (a real XPU: nothing patched); ``cuda`` (stock Triton on an NVIDIA
GPU, with the :mod:`.shims`); ``cpu`` (``TRITON_INTERPRET=1`` on CPU tensors: the shims
plus :mod:`.interpreter`; ``COPYFIX_CPU_VENDOR=nvidia`` runs FlagGems' NVIDIA backend).
A patch may make the emulator work, never make a wrong result look right.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import sys
from pathlib import Path

from . import interpreter, shims, state
from .faults import xpu_device_model, xpu_fallback_failure  # noqa: F401
from .interpreter import aten_copy_kernel, cpu_dispatch  # noqa: F401
from .kunlunxin import base_copy_module, copy_module  # noqa: F401
from .state import CPU_VENDORS, ENV_CPU_VENDOR, ENV_MODE, MODES, require  # noqa: F401

# Versions the patches were checked against (a prefix of the public version).  torch
# 2.13 on CPU, 2.11 on the GPU box; Triton 3.6 and the matrix (`make test-triton`).
SUPPORTED_VERSIONS = {
    "torch": ("2.13.0", "2.11."),
    "triton": ("3.0.0", "3.2.0", "3.3.1", "3.4.0", "3.5.1", "3.6.0"),
}

# The FlagGems bases the patches were written for, by the sha256 of the files they lean
# on in the package `import flag_gems` will load (never a distribution's metadata).
FLAGGEMS_BASES = {
    "5.0.2": {
        "utils/libentry.py": "922dec5776e887ff",
        "runtime/backend/__init__.py": "a1de1ff37b7b19d6",
        "runtime/backend/device.py": "e05ab08c424ee384",
        "runtime/backend/_kunlunxin/utils/pointwise_dynamic.py": "96b763df5dc75403",
    },
    "main-2026-08-21": {
        "utils/libentry.py": "414e8a3f74e2522e",
        "runtime/backend/__init__.py": "46c68ebf66b4c58c",
        "runtime/backend/_kunlunxin/utils/pointwise_dynamic.py": "fd0e469c8b090252",
    },
}


def __getattr__(name: str):
    if name in ("MODE", "CPU_VENDOR", "GEMS_VENDOR", "BASE"):
        return getattr(state, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def flag_gems_dir() -> Path | None:
    """The package directory `import flag_gems` will load (found without importing)."""
    spec = importlib.util.find_spec("flag_gems")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def flag_gems_base(package: Path | None = None) -> str | None:
    """The key of FLAGGEMS_BASES whose files ``package`` (default: the flag_gems to be
    imported) holds, or None; a file the overlay patched counts as its pre-image."""
    package = package or flag_gems_dir()
    if package is None:
        return None

    def held(rel):
        kept = package / "_overlay_preimages" / rel
        path = kept if kept.is_file() else package / rel
        if path.is_file():
            return hashlib.sha256(path.read_bytes()).hexdigest()[:16]

    for name, files in FLAGGEMS_BASES.items():
        if all(held(rel) == sha for rel, sha in files.items()):
            return name
    return None


def _declared_flag_gems_version(package: Path | None) -> str:
    if package is None:
        return "not installed"
    for name in ("_version.py", "__init__.py"):
        path = package / name
        if path.is_file():
            match = re.search(
                r'^(?:__version__|version)\s*(?::\s*str\s*)?=\s*["\']([^"\']+)["\']',
                path.read_text(),
                re.M,
            )
            if match:
                return match.group(1)
    return "no version string"


def _installed_versions() -> dict[str, str]:
    import torch
    import triton

    package = flag_gems_dir()
    base = flag_gems_base(package)
    declared = _declared_flag_gems_version(package)
    return {
        "torch": torch.__version__,
        "triton": triton.__version__,
        "flag_gems": base or f"{declared} at {package}",
    }


def versions() -> dict[str, str | None]:
    """torch / triton / flag_gems (base) versions and the active emulation mode."""
    return {**_installed_versions(), "mode": state.MODE}


def _check_versions(mode: str) -> str | None:
    """Raise unless ``mode``'s patched libraries are supported; return the base."""
    found = _installed_versions()
    base = found["flag_gems"] if found["flag_gems"] in FLAGGEMS_BASES else None
    bad = []
    for lib, prefixes in SUPPORTED_VERSIONS.items():
        if not found[lib].split("+", 1)[0].startswith(prefixes):
            wanted = " or ".join(p + "*" if p.endswith(".") else p for p in prefixes)
            bad.append(f"{lib} {found[lib]} (written for {wanted})")
    if base is None:
        wanted = "FlagGems " + " or ".join(FLAGGEMS_BASES)
        bad.append(f"flag_gems {found['flag_gems']} (written for {wanted})")
    if bad and mode != "native":  # (native patches nothing)
        raise RuntimeError(
            f"copyfix.emulation refuses to run in {mode!r} mode: its patches of library internals were "
            f"not written for {', '.join(bad)}. Re-check every patch in {Path(__file__).parent} against "
            "these versions, then update SUPPORTED_VERSIONS / FLAGGEMS_BASES."
        )
    return base


def _detect_mode() -> str:
    if shutil.which("xpu-smi") or importlib.util.find_spec("torch_xmlir") is not None:
        return "native"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def activate(mode: str | None = None, *, detect: bool = True) -> str | None:
    """Set up and return the emulation mode; call before ``import flag_gems``.

    None: ``$COPYFIX_EMULATION``, else native > cuda > cpu as detected (with ``detect``
    False: None, no emulation).  Idempotent; another mode than the active one raises.
    """
    if mode is None:
        mode = state.MODE or os.environ.get(ENV_MODE)
        if not mode and not detect:
            return None
        mode = mode or _detect_mode()
    if mode not in MODES:
        raise ValueError(f"unknown emulation mode {mode!r}; expected one of {MODES}")
    if state.MODE is not None:
        if mode != state.MODE:
            raise RuntimeError(
                f"emulation already active in {state.MODE!r} mode; cannot switch to {mode!r}"
            )
        return state.MODE
    if mode == "cpu":
        interpreter.import_triton_uninterpreted()  # (before _check_versions imports it)
    base = _check_versions(mode)
    if mode != "native" and "flag_gems" in sys.modules:
        raise RuntimeError(
            "copyfix.emulation.activate() must run before `import flag_gems` "
            "(its kernels are defined at import time)"
        )
    if mode == "cpu":
        vendor = cpu_vendor()
        interpreter.setup_cpu_environment(vendor)
        if vendor == "kunlunxin":  # (the shims serve the kunlunxin sources only)
            shims.patch_triton_common()
        interpreter.patch_triton_interpreter(vendor)
        if vendor == "kunlunxin":  # (before `import flag_gems` binds the names)
            from . import xpu_libdevice

            xpu_libdevice.install(sys.modules["triton.language.extra.xpu.libdevice"])
        interpreter.patch_torch_cpu()
        interpreter.patch_flag_gems_cpu(base)
        state.CPU_VENDOR = vendor
    elif mode == "cuda":
        import triton

        if triton.knobs.runtime.interpret:
            raise RuntimeError(
                "cuda emulation mode runs compiled Triton; unset TRITON_INTERPRET"
            )
        os.environ["GEMS_VENDOR"] = "kunlunxin"
        shims.patch_triton_common()
        shims.patch_triton_jit_run()
    state.GEMS_VENDOR = os.environ.get("GEMS_VENDOR")
    state.BASE = base
    state.MODE = mode
    return mode


def cpu_vendor() -> str:
    vendor = os.environ.get(ENV_CPU_VENDOR) or "kunlunxin"
    if vendor not in CPU_VENDORS:
        raise ValueError(
            f"unknown {ENV_CPU_VENDOR}={vendor!r}; expected one of {CPU_VENDORS}"
        )
    return vendor


def device() -> str:
    """Device string for tensors under test: "cpu" in the cpu emulation, else flag_gems.device."""
    if require() == "cpu":
        return "cpu"
    import flag_gems

    return flag_gems.device
