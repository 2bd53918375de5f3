"""The base's own ``pointwise_dynamic`` (without PR 3), beside the composed one.

The composition keeps each patched file's pre-image under
``flag_gems/_overlay_preimages/``.  :func:`base_twins` loads that pre-image as a
private module and builds, for every ``PointwiseDynamicFunction`` an imported
FlagGems module holds as a global, a twin of the base class from the same schema,
scalar function and codegen config.  :func:`swapped` puts the twins in place of the
originals for the duration of a ``with`` block, so one process times the same op
before and after PR 3 (op modules look these globals up at each call).
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import types
from pathlib import Path

GENERIC = "flag_gems.utils.pointwise_dynamic"
KUNLUNXIN = "_kunlunxin.utils.pointwise_dynamic"
_PREIMAGE = {
    GENERIC: "utils/pointwise_dynamic.py",
    KUNLUNXIN: "runtime/backend/_kunlunxin/utils/pointwise_dynamic.py",
}


def _load_preimage(module_name: str):
    import flag_gems

    kept = (
        Path(flag_gems.__file__).parent / "_overlay_preimages" / _PREIMAGE[module_name]
    )
    if not kept.is_file():
        raise RuntimeError(f"{kept} missing: this flag_gems is not a PR 3 composition")
    name = "copyfix_base_" + module_name.replace(".", "_")
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, kept)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def base_twins(module_name: str) -> dict:
    """{(module, global name): twin} for every pointwise function built by
    ``module_name``'s class that an imported FlagGems module holds."""
    ours = sys.modules[module_name].PointwiseDynamicFunction
    base = _load_preimage(module_name).PointwiseDynamicFunction
    twins, made = {}, {}
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
    saved = {key: getattr(*key) for key in twins}
    try:
        for (mod, attr), twin in twins.items():
            setattr(mod, attr, twin)
        yield
    finally:
        for (mod, attr), value in saved.items():
            setattr(mod, attr, value)
