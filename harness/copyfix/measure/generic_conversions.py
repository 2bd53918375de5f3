"""The generic ``copy_`` (flag_gems/ops/copy.py) and ``_to_copy`` against torch, every
dtype pair (harness only).

Every (src, dst) pair of :data:`DTYPES` x :data:`LAYOUTS`, edge values of each source
dtype, through ``before`` (the base file the overlay replaces, kept under
``flag_gems/_overlay_preimages/``) and ``after`` (the overlay's), called directly, not
through ``use_gems``; each result compared with torch's bit for bit, a NaN by class,
less the float -> integer conversions C leaves undefined (``c_undefined``; torch
defines float -> uint8 through int64).  The overlay tests run it under the copyfix
emulation.  ``--ptx`` prints the PTX conversions of a kernel, compiled without a GPU:

    PYTHONPATH=harness python -m copyfix.measure.generic_conversions --ptx COPY_PY PLAN_JSON
"""

from __future__ import annotations

import argparse
import collections
import importlib
import importlib.util
import json
import sys
import unittest.mock
from pathlib import Path

import torch

from copyfix.measure import probe_conversions
from copyfix.measure.probe_conversions import BITS_DTYPE, _from_bits, c_undefined
from copyfix.records import sha256

REPO = Path(__file__).resolve().parents[3]
OP_RELPATH = "ops/copy.py"
# sha256 of the base files the overlay replaces (pyproject preimages), per op file
PREIMAGES = {
    "3683ed0fede9f657bed2c2416854c5af6ba8b736a40ea495c3c6dafaeccf4366": "5.0.2",
    "7bffb1675c120a6293e3e057325520db911494cfd7aeb1abcf25ff0cde3ce5a2": "main-2026-08-21",
}
TO_PREIMAGES = {
    "674e7f79131777f44df86e83af694bfd4b575383bb4de65e08cbe19c2aa7b85f": "5.0.2",
    "77e0bed15012788a707e33831d6c0bcfb62c58721b558950d31ef399b7b357f1": "main-2026-08-21",
}
KUNLUNXIN_TO_PREIMAGES = {
    "bf68048df5af59e4be8be147f30c68c43844bbe46b346880ff4e219717960f91": "5.0.2",
    "024a37d225d9f9e001b3d3b9b36a9e57fef3aba4757d3415ef6498de7592c8f2": "main-2026-08-21",
}


# One measured op: its file in flag_gems, the module FlagGems runs, its pre-images
Op = collections.namedtuple("Op", "relpath module preimages")
OPS = {
    "copy_": Op(OP_RELPATH, "flag_gems.ops.copy", PREIMAGES),
    "to_copy": Op("ops/to.py", "flag_gems.ops.to", TO_PREIMAGES),
    "kunlunxin_to_copy": Op(
        "runtime/backend/_kunlunxin/ops/to.py",
        "_kunlunxin.ops.to",
        KUNLUNXIN_TO_PREIMAGES,
    ),
}

DTYPES = {
    name: getattr(torch, name)
    for name in (
        "bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32",
        "uint64", "float16", "bfloat16", "float32", "float64", "float8_e4m3fn",
        "float8_e5m2",
    )
}  # fmt: skip
# (float8 *fnuz are AMD-only Triton types; float8_e8m0fnu never reaches Triton.)
LAYOUTS = ("contiguous", "transpose", "expand")

# The issue's four cases (stock 5.0.2 on the H200): src dtype, values, dst dtype;
# the _to_copy issue's three
ISSUE_CASES = (
    ("float32", [0.5, -0.25, 0.0, 2.0, float("nan")], "bool"),
    ("int16", [256, 0, -256, 1], "bool"),
    ("int32", [16842753], "bfloat16"),
    ("float32", [-1.5, -3.0], "uint8"),
)
TO_ISSUE_CASES = (
    ("float32", [0.5, -0.25, 2.0, 1e-45], "bool"),
    ("float32", [-1.5, -3.0], "uint8"),
    ("int32", [16842753], "bfloat16"),
)

# ------------------------------------------------------------------- edge values

_F64_BITS = [
    0x0000000000000000, 0x8000000000000000, 0x7FF0000000000000, 0xFFF0000000000000,
    0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001,  # NaNs
    0x0000000000000001, 0x000FFFFFFFFFFFFF, 0x8000000000000001,  # subnormals
    0x0010000000000000, 0x7FEFFFFFFFFFFFFF, 0xFFEFFFFFFFFFFFFF,  # min normal, +-max
    0x47EFFFFFEFFFFFFF, 0x47EFFFFFF0000000, 0xC7EFFFFFF0000000,  # float32 overflow
    0x36A0000000000000, 0x36A0000000000001, 0x369FFFFFFFFFFFFF,  # float32 subnormal ties
]  # fmt: skip
_F64_VALUES = [
    1 + 2**-11 + 2**-40, -(1 + 2**-11 + 2**-40), 1 + 2**-11 - 2**-40,  # float16 ties
    1 + 2**-8 + 2**-40, -(1 + 2**-8 + 2**-40), 1 + 2**-8 - 2**-40,  # bfloat16 ties
    65520 - 2**-20, 65519.99, 65504.0, 2.0**-24 * 1.5 + 2**-60, 2.0**-25 + 2**-70,
    0.5, -1.5, 2.75, -0.75, 127.5, -128.75, 255.75, 256.0, -1.0, 300.5, 65535.0,
    2147483647.5, -2147483648.75, 2.0**63, -(2.0**63), 2.0**64, 1e300, -1e-300,
]  # fmt: skip
_UINT_VALUES = {
    "uint16": [0, 1, 255, 256, 257, 2049, 4097, 32767, 32768, 65519, 65520, 65535],
    "uint32": [
        0, 1, 257, 65535, 65536, 2**24 + 1, 0x1010001, 0x1018001, 2**31 - 1, 2**31,
        0xFEFEFFFF, 2**32 - 1,
    ],
    "uint64": [
        0, 1, 65520, 0x1010001, 2**32 + 1, 2**40 + 2**32 + 1, 2**62 + 2**54 + 1,
        2**63 - 1, 2**63, 2**63 + 2**55 + 1, 2**64 - 1,
    ],
}  # fmt: skip


def inputs(name: str) -> torch.Tensor:
    """Edge values of source dtype ``name`` (CPU): integer extremes, rounding ties of
    every narrower float, +-0, +-inf, NaN, subnormals, overflow thresholds."""
    if name in probe_conversions.DTYPES:
        return probe_conversions.inputs(name)
    dtype = DTYPES[name]
    if name == "float64":
        f32 = probe_conversions.inputs("float32").double()  # exact
        values = torch.tensor(_F64_VALUES, dtype=torch.float64)
        return torch.cat([_from_bits(_F64_BITS, torch.float64), values, f32])
    if name in _UINT_VALUES:
        signed = [v - (1 << 64) if v >> 63 else v for v in _UINT_VALUES[name]]
        t = torch.tensor(signed, dtype=torch.int64)
        return t.view(torch.uint64) if name == "uint64" else t.to(dtype)
    return torch.arange(256, dtype=torch.int16).to(torch.uint8).view(dtype)  # float8


def defined(src: torch.Tensor, dst_dtype: torch.dtype) -> torch.Tensor:
    """Mask of the elements whose conversion to dst_dtype torch defines (CPU bool)."""
    dst = torch.int64 if dst_dtype is torch.uint8 else dst_dtype
    return ~torch.tensor(c_undefined(src, dst), dtype=torch.bool).reshape(src.shape)


def _bits(t: torch.Tensor) -> torch.Tensor:
    """Integer view of t's elements on the CPU, NaNs made one pattern (-1)."""
    t = t.cpu()
    if t.dtype is torch.bool:
        return t.view(torch.uint8).to(torch.int64)
    raw = t.contiguous().view(BITS_DTYPE[t.element_size()]).to(torch.int64)
    if t.is_floating_point():
        nan = t.float().isnan() if t.element_size() < 8 else t.isnan()
        raw = torch.where(nan, torch.full_like(raw, -1), raw)
    return raw


def differing(got: torch.Tensor, ref: torch.Tensor, src: torch.Tensor) -> int:
    """Elements of got that are not ref's bits (NaN by class), where torch defines them."""
    mask = defined(src.cpu(), got.dtype)
    return int(((_bits(got) != _bits(ref)) & mask).sum())


def layout_pair(values: torch.Tensor, dst_dtype: torch.dtype, layout: str, device):
    """(dst, src) of one layout, src holding every value of ``values`` at least once."""
    n = values.numel()
    if layout == "contiguous":
        src = values.to(device)
    elif layout == "transpose":  # 2 x n view of an n x 2 tensor: strides (1, 2)
        back = values[torch.arange(n - 1, -1, -1)]
        src = torch.stack([values, back], 1).to(device).t()
    elif layout == "expand":  # stride 0 in the outer dimension
        src = values.to(device).reshape(1, n).expand(3, n)
    else:
        raise ValueError(layout)
    return torch.empty(src.shape, dtype=dst_dtype, device=device), src


# ------------------------------------------------------------------ the two ops


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def generic_ops(op: str = "copy_") -> dict:
    """{"before": module, "after": module, ...files}: the pre-image and the overlay op."""
    import flag_gems

    spec = OPS[op]
    package = Path(flag_gems.__file__).parent
    after = importlib.import_module(spec.module)
    preimage = package / "_overlay_preimages" / spec.relpath
    if not preimage.is_file():
        raise RuntimeError(
            f"{preimage} missing: this flag_gems does not overlay {spec.relpath} "
            "(install the repo: pip install -e .)"
        )
    before_sha = sha256(preimage)
    if before_sha not in spec.preimages:
        raise RuntimeError(f"{preimage} is no known base file (sha256 {before_sha})")
    # (named inside the op's package, so that a relative import resolves as FlagGems')
    name = spec.module.rsplit(".", 1)[0] + "._copyfix_preimage_" + op
    before = _load(preimage, name)
    return {
        "op": op,
        "before": before,
        "after": after,
        "before_file": {"path": str(preimage), "sha256": before_sha},
        "after_file": {"path": after.__file__, "sha256": sha256(after.__file__)},
        "base": spec.preimages[before_sha],
    }


def cpu_device_guard():
    """cpu mode: ``torch.cuda.device(None)`` (a CPU tensor's index), which torch 2.13's
    _exchange_device rejects, made -1 (no switch), as for the kunlunxin _DeviceGuard."""
    stock = torch.cuda.device.__init__

    def init(self, device):
        stock(self, device)
        if self.idx is None:
            self.idx = -1

    return unittest.mock.patch.object(torch.cuda.device, "__init__", init)


def run_op(module, dst: torch.Tensor, src: torch.Tensor):
    """module.copy_(dst, src), or dst = module.to_copy(src, dtype=dst.dtype) for a
    _to_copy module; returns None, or the error's first line."""
    try:
        if hasattr(module, "to_copy"):
            got = to_copy(module, src, dst.dtype)
            if got.stride() != dst.stride():
                return f"layout: strides {got.stride()}, torch's {dst.stride()}"
            dst.copy_(got)  # (same dtype and strides: a plain copy)
        else:
            module.copy_(dst, src)
    except Exception as exc:  # a failed conversion is a result too
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return None


def to_copy(module, src: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``module.to_copy(src, dtype=dtype)`` as on a device: in cpu mode a pre-image (no
    ``_is_host_or_transfer``) would hand CPU tensors to aten, so run its kernel."""
    from copyfix import emulation

    if emulation.MODE != "cpu" or hasattr(module, "_is_host_or_transfer"):
        return module.to_copy(src, dtype=dtype)
    out = torch.empty_like(src, dtype=dtype)
    kernel = module._to_copy_func
    if src.dtype == torch.bfloat16:
        kernel = getattr(module, "_to_copy_func_close_interleave", kernel)
    return kernel(src, out0=out)


def measure(ops: dict, device, dtypes=None, sources=None) -> dict:
    """{"src->dst": {layout: {"elements", "before_differ", "after_differ", ...}}}
    for every src in ``sources`` (default: ``dtypes``) and dst in ``dtypes``."""
    names = list(dtypes or DTYPES)
    pairs = {}
    for src_name in sources or names:
        values = inputs(src_name)
        for dst_name in names:
            dst_dtype = DTYPES[dst_name]
            entry = {}
            for layout in LAYOUTS:
                ref_dst, src = layout_pair(values, dst_dtype, layout, device)
                try:  # torch's own copy_ / _to_copy (nothing of FlagGems dispatched)
                    if hasattr(ops["after"], "to_copy"):
                        ref_dst = src.to(dst_dtype)
                    else:
                        ref_dst.copy_(src)
                except Exception as exc:  # e.g. a dtype pair torch lacks on this device
                    entry[layout] = {
                        "torch_error": f"{type(exc).__name__}: {exc}"[:200]
                    }
                    continue
                row = {"elements": ref_dst.numel()}
                for which in ("before", "after"):
                    dst = torch.zeros_like(ref_dst)  # (strides kept: preserve_format)
                    error = run_op(ops[which], dst, src)
                    got = None if error else differing(dst, ref_dst, src)
                    row[f"{which}_differ"] = got
                    if error:
                        row[f"{which}_error"] = error
                entry[layout] = row
            pairs[f"{src_name}->{dst_name}"] = entry
    return pairs


def issue_cases(ops: dict, device) -> list[dict]:
    """The issue's cases (copy_'s four, or _to_copy's three): torch, before, after."""
    out = []
    cases = ISSUE_CASES if ops.get("op", "copy_") == "copy_" else TO_ISSUE_CASES
    for src_name, values, dst_name in cases:
        src = torch.tensor(values, dtype=DTYPES[src_name], device=device)
        row = {"src": src_name, "dst": dst_name, "values": values}
        ref = torch.empty(src.shape, dtype=DTYPES[dst_name], device=device)
        row["torch"] = ref.copy_(src).cpu().tolist()
        for which in ("before", "after"):
            dst = torch.zeros_like(ref)
            error = run_op(ops[which], dst, src)
            row[which] = error or dst.cpu().tolist()
        out.append(row)
    return out


_COUNTS = ("before_differ", "after_differ", "before_errors", "after_errors",
           "torch_errors")  # fmt: skip


def summarise(pairs: dict) -> dict:
    """Differing elements and errors over pairs and layouts (torch's own: torch_errors)."""
    total = dict.fromkeys(_COUNTS, 0)
    rows = {
        p: [r for r in e.values() if "torch_error" not in r] for p, e in pairs.items()
    }
    total["torch_errors"] = sum(len(e) - len(rows[p]) for p, e in pairs.items())
    cells = [r for pair_rows in rows.values() for r in pair_rows]
    for which in ("before", "after"):
        counts = [r[f"{which}_differ"] for r in cells]
        total[f"{which}_errors"] = counts.count(None)
        total[f"{which}_differ"] = sum(c or 0 for c in counts)
    float8 = [p for p in pairs if "float8" in p]
    total["float8_pairs"] = {
        which: sum(r[which] or 0 for p in float8 for r in rows[p])
        for which in ("before_differ", "after_differ")
    }
    for which in ("before", "after"):
        total[f"pairs_{which}_differ"] = sorted(
            p
            for p, pair_rows in rows.items()
            if any(r[f"{which}_differ"] or r.get(f"{which}_error") for r in pair_rows)
        )
    return total


# -------------------------------------------------- compiled conversions (no GPU)

# Triton's names of the torch dtypes (pointer signatures)
TRITON_TYPES = {
    "bool": "i1", "uint8": "u8", "int8": "i8", "int16": "i16", "int32": "i32",
    "int64": "i64", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64",
}  # fmt: skip
_WRAPPER = """
import triton
import triton.language as tl

{functions}

@triton.jit
def probe(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, {name}(tl.load(src_ptr + offs, mask=mask)), mask=mask)
"""


def scalar_functions(path) -> dict[str, str]:
    """{name: source} of the ``@triton.jit`` functions of a copy.py, decorators dropped
    (the scalar functions pointwise_dynamic lifts; read, not imported)."""
    import ast

    text = Path(path).read_text()
    lines, out = text.splitlines(), {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and any(
            ast.unparse(d) == "triton.jit" for d in node.decorator_list
        ):
            out[node.name] = "\n".join(lines[node.lineno - 1 : node.end_lineno])
    return out


def ptx_conversions(path, plan: dict, arch: int = 90) -> dict:
    """{"src->dst": the PTX conversion instructions} of a kernel as pointwise_dynamic
    generates it (load src, ``plan``'s scalar function of the copy.py at ``path``, store
    into dst), compiled for compute capability ``arch`` (no GPU; TRITON_INTERPRET unset).
    """
    import re
    import tempfile

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    functions = scalar_functions(path)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for pair, name in plan.items():
            s, d = ("*" + TRITON_TYPES[x] for x in pair.split("->"))
            body = "\n\n".join(f"@triton.jit\n{code}" for code in functions.values())
            module_path = Path(tmp) / f"probe_{len(out)}.py"
            module_path.write_text(_WRAPPER.format(functions=body, name=name))
            module = _load(module_path, f"_copyfix_ptx_probe_{len(out)}")
            sig = {"src_ptr": s, "dst_ptr": d, "n": "i32", "BLOCK": "constexpr"}
            code = ASTSource(fn=module.probe, signature=sig, constexprs={"BLOCK": 128})
            ptx = triton.compile(code, target=GPUTarget("cuda", arch, 32)).asm["ptx"]
            out[pair] = sorted(set(re.findall(r"\bcvt(?:\.\w+)+", ptx)))
    return out


# ------------------------------------------------------------------------ driver


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="copyfix.measure.generic_conversions", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--ptx", nargs=2, metavar=("COPY_PY", "PLAN_JSON"), required=True,
        help='print the sm_90 PTX conversions of PLAN_JSON ("src->dst": scalar '
        "function of COPY_PY)")  # fmt: skip
    args = parser.parse_args(argv)
    plan = json.loads(Path(args.ptx[1]).read_text())
    print(json.dumps(ptx_conversions(args.ptx[0], plan)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
