"""The base's own ``pointwise_dynamic`` (without PR 7), beside the composed one.

:func:`base_twins` loads the pre-image the composition keeps under
``flag_gems/_overlay_preimages/`` and builds, for every ``PointwiseDynamicFunction``
an imported FlagGems module holds as a global, a twin of the base class (same schema,
scalar function, config); the functions of op modules PR 6 patches (``ops/where.py``)
are their pre-image's.  :func:`swapped` puts the twins in place within a ``with``
block, so one process times the same op before and after PR 7.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import types
from pathlib import Path
from unittest import mock

GENERIC = "flag_gems.utils.pointwise_dynamic"
KUNLUNXIN = "_kunlunxin.utils.pointwise_dynamic"
_PREIMAGE = {
    GENERIC: "utils/pointwise_dynamic.py",
    KUNLUNXIN: "runtime/backend/_kunlunxin/utils/pointwise_dynamic.py",
}


def _kept_dir() -> Path:
    import flag_gems

    return Path(flag_gems.__file__).parent / "_overlay_preimages"


def _load_preimage(module_name: str, relative: str | None = None):
    kept = _kept_dir() / (relative or _PREIMAGE[module_name])
    if not kept.is_file():
        raise RuntimeError(f"{kept} missing: this flag_gems is not a PR 7 composition")
    name = "copyfix_base_" + module_name.replace(".", "_")
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, kept)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _op_preimages() -> dict:
    """{(op module, name): the pre-image's function} of the patched, imported op modules."""
    from copyfix.compose import overlay_info

    swaps = {}
    prefix = "src/flag_gems/ops/"
    for patch in overlay_info(_kept_dir().parent).get("PATCHES", []):
        if not patch.startswith(prefix):
            continue
        rel = patch[len("src/flag_gems/") : -len(".patch")]
        ours = sys.modules.get("flag_gems." + rel[: -len(".py")].replace("/", "."))
        if ours is None:
            continue
        base = _load_preimage(ours.__name__, rel)
        for attr, value in vars(base).items():
            if (
                isinstance(value, types.FunctionType)
                and value.__module__ == base.__name__
                and isinstance(getattr(ours, attr, None), types.FunctionType)
            ):
                swaps[(ours, attr)] = value
    return swaps


def base_twins(module_name: str) -> dict:
    """{(module, global name): twin} of every pointwise function of ``module_name``'s
    class an imported module holds, and of every function of a patched op module."""
    if module_name == KUNLUNXIN and not (_kept_dir() / _PREIMAGE[KUNLUNXIN]).is_file():
        return {}  # not patched (the launch cache is generic-only): before is this code
    ours = sys.modules[module_name].PointwiseDynamicFunction
    base = _load_preimage(module_name).PointwiseDynamicFunction
    twins = _op_preimages() if module_name == GENERIC else {}
    made = {}
    for mod in list(sys.modules.values()):  # op modules, vendor ones (_nvidia...) too
        if not isinstance(mod, types.ModuleType):
            continue
        for attr, value in list(getattr(mod, "__dict__", {}).items()):
            if type(value) is ours:
                if id(value) not in made:
                    twin = base(value.fx, value._scalar_fn, value.config)
                    if hasattr(value, "complex_strategy"):  # (main: complex dispatch)
                        twin.complex_strategy = value.complex_strategy
                    made[id(value)] = twin
                twins[(mod, attr)] = made[id(value)]
    return twins


@contextlib.contextmanager
def swapped(twins: dict):
    with contextlib.ExitStack() as stack:
        for (mod, attr), twin in twins.items():
            stack.enter_context(mock.patch.object(mod, attr, twin))
        yield
