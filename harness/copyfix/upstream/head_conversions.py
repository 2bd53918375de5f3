"""PR 2 and PR 4 on upstream's newest files: every dtype pair, head file vs head + patch.

Run in a child on the head-like tree of ``tests/overlay/test_head_integration.py``, cpu
mode: ``after`` is the tree's patched module, ``before`` upstream's head file loaded
beside it (with :data:`SHIMS`), both over :mod:`copyfix.measure.generic_conversions`.
"""

from __future__ import annotations

import argparse
import importlib
import tempfile
from pathlib import Path

from copyfix import provenance, records

REPO = Path(__file__).resolve().parents[3]
LATER = REPO / ".upstream" / "later"
# op -> (the later file, the module the tree holds it as)
OPS = {
    "copy_": ("ops_copy.py", "flag_gems.ops.copy"),
    "to_copy": ("ops_to.py", "flag_gems.ops.to"),
    "kunlunxin_to_copy": ("kunlunxin_to_head.py", "_kunlunxin.ops.to"),
}
# What the head files need to run on the emulated device at all: their host check
# (inline) sends every CPU tensor to aten, and in cpu mode the emulated device is the
# CPU.  The patched files call ``_is_host_or_transfer``, which the emulation adapts the
# same way (copyfix.emulation.interpreter._to_copy_on_the_emulated_device).
SHIMS = {
    "ops_to.py": (
        'if target_device != x.device or x.device.type == "cpu":',
        "if target_device != x.device:",
    ),
    "kunlunxin_to_head.py": (
        'x.device.type == "cpu" and target_device.type == "cpu"',
        "False",
    ),
}
# torch 2.13 has no named tensors, and no Tensor.has_names, which the head to.py's
# _can_use_triton calls (and the patched one, which leaves that line as it is): where it
# is absent it answers False, as every tensor of 2.13 is unnamed.
TORCH_SHIM = "Tensor.has_names() -> False where torch lacks it (2.13)"
PATCHES = {
    "copy_": "src/flag_gems/ops/copy.py.head.patch",
    "to_copy": "src/flag_gems/ops/to.py.head.patch",
    "kunlunxin_to_copy": "src/flag_gems/runtime/backend/_kunlunxin/ops/to.py.head.patch",
}


def _before(name: str, module: str, work: Path):
    from copyfix.measure import generic_conversions as gc

    text = (LATER / name).read_text()
    if name in SHIMS:
        old, new = SHIMS[name]
        if text.count(old) != 1:
            raise SystemExit(f"{name}: the shim's line {old!r} is not there once")
        text = text.replace(old, new)
    path = work / name
    path.write_text(text)
    before = gc._load(path, module.rsplit(".", 1)[0] + "._copyfix_head_" + name[:-3])
    if hasattr(before, "to_copy"):
        # (run its to_copy itself: generic_conversions.to_copy does so for a module
        # that names its host check, as the shim made this one's)
        before._is_host_or_transfer = None
    return before


def measure(ops=tuple(OPS)) -> dict:
    from copyfix import emulation

    emulation.activate("cpu")
    import torch

    import flag_gems  # noqa: F401  (the tree's)

    if not hasattr(torch.Tensor, "has_names"):
        torch.Tensor.has_names = lambda self: False  # TORCH_SHIM

    from copyfix.measure import generic_conversions as gc

    out = {}
    with tempfile.TemporaryDirectory() as work, gc.cpu_device_guard():
        for op in ops:
            name, module = OPS[op]
            after = importlib.import_module(module)
            pair = {"before": _before(name, module, Path(work)), "after": after}
            pairs = gc.measure(pair, emulation.device())
            path = after.__file__
            out[op] = {
                "before_file": {"later": name, "sha256": records.sha256(LATER / name)},
                "after_file": {"path": path, "sha256": records.sha256(path)},
                "patch": PATCHES[op],
                "summary": gc.summarise(pairs),
                "before_errors": _errors(pairs, "before"),
                "after_errors": _errors(pairs, "after"),
            }
    return out


def _errors(pairs: dict, which: str) -> dict:
    """{first line of an error: the "src->dst layout"s that raised it}"""
    found = {}
    for pair, layouts in pairs.items():
        for layout, row in layouts.items():
            error = row.get(f"{which}_error")
            if error:
                found.setdefault(error[:160], []).append(f"{pair} {layout}")
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="copyfix.upstream.head_conversions")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ops", nargs="*", default=list(OPS), choices=list(OPS))
    args = parser.parse_args(argv)
    import platform

    from copyfix import emulation

    emulation.activate("cpu")  # (before triton is imported)
    import torch
    import triton

    record = {
        "what": __doc__.split("\n")[0],
        "mode": "cpu (Triton interpreter, copyfix cpu emulation, toolchain model on)",
        "machine": f"{platform.machine()}, CPU only",
        "versions": {"torch": torch.__version__, "triton": triton.__version__},
        **provenance.measured(*PATCHES.values(), env=None),
        "shims": {
            **{k: {"old": o, "new": n} for k, (o, n) in SHIMS.items()},
            "torch": TORCH_SHIM,
        },
        "date": records.date(),
        "ops": measure(args.ops),
    }
    records.write(args.out, record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
