"""Where the kunlunxin copy module lives, and the pristine base module beside the overlay."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import types
from pathlib import Path

from . import state

# The name flag_gems imports the kunlunxin copy under (the backend folder is on
# sys.path), and where the file lives in the package.
KUNLUNXIN_COPY_MODULE = "_kunlunxin.ops.copy"
KUNLUNXIN_COPY_RELPATH = "runtime/backend/_kunlunxin/ops/copy.py"

# the pristine base copy.py files (pyproject.toml [tool.copyfix.preimages])
BASE_COPY_SHA256 = {
    "43886a575ea4b819b531686608e90c0d3439811584a28b2ab5355555dfa2baa1": "flag-gems 5.0.2 (PyPI)",
    "9387e1551d5d5ff5db7066bf8f146102032fc7bb2787ba05ff266b56ceb510bf": "FlagGems main 2026-08-21 (ed2508bc)",
}

_base_copy_module: types.ModuleType | None = None


def copy_module() -> types.ModuleType:
    """The kunlunxin copy module FlagGems dispatches to (never import it under its
    flag_gems.runtime.backend name: that would be a second copy with its own kernels)."""
    state.require()
    import flag_gems  # noqa: F401  (imports the vendor ops)

    module = sys.modules.get(KUNLUNXIN_COPY_MODULE)
    if module is None:
        raise RuntimeError(
            f"{KUNLUNXIN_COPY_MODULE} is not loaded: flag_gems did not select the kunlunxin backend "
            f"(GEMS_VENDOR={state.GEMS_VENDOR!r})"
        )
    _check_copy_module(module)
    return module


def _check_copy_module(module) -> None:
    for name in ("copy", "copy_"):
        if not hasattr(module, name):
            raise RuntimeError(f"{module.__name__} ({module.__file__}) has no {name}")
    if not hasattr(module, "_copy_kernel"):
        # (upstream's later tle_copy-era copy.py, see copyfix.upstream.later)
        return
    config = module._copy_kernel.config
    if config.prefer_1d_tile is not True:
        raise RuntimeError(
            f"{module.__name__}._copy_kernel does not use the kunlunxin 1-D tile codegen config "
            f"(prefer_1d_tile={config.prefer_1d_tile!r}); is GEMS_VENDOR=kunlunxin?"
        )


def base_copy_module() -> types.ModuleType:
    """The pristine base kunlunxin copy module: where the overlay replaced copy.py, the
    base file (``_overlay_info.BASE_COPY_PATH``, else the kept pre-image) run as a
    separate module of the same ``_kunlunxin`` package; else :func:`copy_module`.  The
    file must hash to one of :data:`BASE_COPY_SHA256`."""
    global _base_copy_module
    current = copy_module()
    if _base_copy_module is not None:
        return _base_copy_module
    path = _base_copy_path()
    if path is None or Path(path).resolve() == Path(current.__file__).resolve():
        _check_base_file(current.__file__)
        return current
    _check_base_file(path)
    spec = importlib.util.spec_from_file_location(
        "_kunlunxin.ops._copyfix_base_copy", path
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _check_copy_module(module)
    _base_copy_module = module
    return module


def _check_base_file(path) -> None:
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    if digest not in BASE_COPY_SHA256:
        raise RuntimeError(
            f"{path} is not a known pristine base kunlunxin copy.py (sha256 {digest}; "
            f"known: {', '.join(BASE_COPY_SHA256.values())})"
        )


def _base_copy_path() -> str | None:
    try:
        info = importlib.import_module("flag_gems._overlay_info")
    except ModuleNotFoundError:
        return None
    path = getattr(info, "BASE_COPY_PATH", None)
    if path:
        return str(path)
    if KUNLUNXIN_COPY_RELPATH in getattr(info, "REPLACED", ()):
        import flag_gems

        preimage = Path(flag_gems.__file__).parent / "_overlay_preimages"
        preimage /= KUNLUNXIN_COPY_RELPATH
        if not preimage.is_file():
            raise RuntimeError(
                f"overlay replaced {KUNLUNXIN_COPY_RELPATH} but its pre-image {preimage} is missing"
            )
        return str(preimage)
    return None
