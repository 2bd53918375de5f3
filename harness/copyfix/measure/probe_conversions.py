"""How Triton converts between the KunlunXIN Triton dtypes, measured (harness only).

Raw ``@triton.jit`` kernels, no flag_gems: for every source dtype, one kernel loads a
fixed list of edge values and writes each of them to every destination dtype three ways:

``implicit``  ``tl.store`` into a destination pointer (the store converts, as in a
              ``pointwise_dynamic`` copy kernel)
``explicit``  ``x.to(<destination dtype>)``, then the store
``via_fp32``  ``x.to(tl.float32)`` stored into the destination pointer (torch's two
              steps for integer -> 16-bit float; a compiler may fold them)

The bits (as unsigned ints), torch's for the same conversion (CPU, and on a GPU the
GPU's) and the versions are written as JSON.  ``compiled``: compiled Triton on a CUDA
GPU (the H200 run is ``results/conversions_h200.json``, ``"source": "device"``);
``interpreter``: ``TRITON_INTERPRET=1`` with the copyfix cpu emulation, CPU tensors
(``"source": "interpreter-provisional"``).

    PYTHONPATH=harness python -m copyfix.measure.probe_conversions --out conversions.json
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys

import torch

from copyfix import records

DTYPES = {
    n: getattr(torch, n)
    for n in ("float16", "bfloat16", "float32", "int8", "int16", "int32", "int64",
              "uint8", "bool")
}  # fmt: skip
VARIANTS = ("implicit", "explicit", "via_fp32")
BITS_DTYPE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}

# --------------------------------------------------------------------- edge values
# Floats as bit patterns (specials, ties) or as values the format holds exactly
# (checked); float -> int values C leaves undefined are excluded by undefined().


def _special_bits(exponent: int, mantissa: int) -> list[int]:
    """The bit patterns every float format's edge values start with, for a format of
    ``exponent`` and ``mantissa`` bits: +-0, +-inf; NaNs (quiet +-, signalling, max
    payload); subnormals (the least, the mantissa's top bit, the largest, -least); the
    min normal and +-max."""
    sign = 1 << (exponent + mantissa)
    inf = ((1 << exponent) - 1) << mantissa
    quiet = inf | 1 << (mantissa - 1)
    return [
        0, sign, inf, sign | inf,
        quiet, sign | quiet, inf | 1, sign - 1,
        1, 1 << (mantissa - 1), (1 << mantissa) - 1, sign | 1,
        1 << mantissa, inf - 1, sign | (inf - 1),
    ]  # fmt: skip


_FP32_BITS = _special_bits(8, 23) + [
    0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF, 0xBF818000,  # bf16 ties at 1
    0x7F7F7FFF, 0x7F7F8000, 0x7F7F8001, 0xFF7F8000,  # bf16 overflow threshold
    0x00008000, 0x00018000, 0x00010000, 0x00007FFF, 0x007F8000, 0x80008001,  # bf16 subnormals
    0x477FEFFF, 0x477FF000, 0x477FF001, 0xC77FF000,  # fp16 overflow threshold (65520)
    0x3F801000, 0x3F803000, 0x3F801001,  # fp16 ties at 1
    0x33000000, 0x33000001, 0x33C00000, 0x387FC000,  # fp16 subnormal ties
]  # fmt: skip
_FP32_VALUES = [
    65504.0, 2.0**-24, 2.0**-14, -(2.0**-24),  # fp16 max, min subnormal, min normal
    0.5, -0.5, 1 - 2.0**-24, 1.5, -1.5, 2.75, -2.75, -0.75,  # truncation toward zero
    127.5, -128.75, 128.0, -129.0, 255.75, 256.0, -1.0, 300.5,  # 8-bit ranges
    32767.5, -32768.5, 32768.0, 65535.0, 65536.0,  # 16-bit ranges
    16777216.0, 16777218.0, 2147483520.0, -2147483648.0, 2147483648.0,  # int32 range
    2.0**62, -(2.0**63), 2.0**63, 1e10, -1e10,  # int64 range
]  # fmt: skip
_FP16_BITS = _special_bits(5, 10) + [
    0x3C04, 0x3C0C, 0x3C05, 0x3C03, 0xBC0C,  # bf16 ties at 1
]  # fmt: skip
_FP16_VALUES = [
    0.5, -1.5, 2.75, -0.75, 127.5, -128.0, -129.0, 255.875, 256.0, -1.0, 300.5,
    32752.0, -32768.0, 32768.0, 65504.0, -65504.0,
]  # fmt: skip
_BF16_BITS = _special_bits(8, 7)
_BF16_VALUES = [
    65280.0, 65536.0, -65536.0,  # fp16 overflow
    2.0**-24, 2.0**-25, 3 * 2.0**-25, 2.0**-26, 2.0**-15,  # fp16 subnormals and ties
    0.5, -1.5, 2.75, -0.75, 127.5, -128.0, -129.0, 255.0, 256.0, -1.0, 300.0,
    32768.0, -32768.0, 2.0**30, -(2.0**31), 2.0**31, 2.0**62, -(2.0**63), 2.0**63,
    2.0**100, -(2.0**100),
]  # fmt: skip
_INT_VALUES = {
    "int8": [-128, -127, -1, 0, 1, 2, 126, 127],
    "int16": [
        -32768, -32767, -2049, -1, 0, 1, 127, 128, 255, 256, 257, 259, 383, 385,
        2047, 2048, 2049, 2051, 4097, 32767,
    ],
    "int32": [
        -(2**31), -(2**31) + 1, -0x1010001, -(2**24) - 1, -1, 0, 1, 255, 256, 257,
        32767, 32768, 65504, 65519, 65520, 65535, 2**24 - 1, 2**24, 2**24 + 1,
        2**24 + 3, 0x1008001, 0x1010001, 0x1018001, 0x7FFFFF80, 0x7FFFFFBF,
        0x7FFFFFC0, 0x7FFFFFC1, 2**31 - 1,
    ],
    "int64": [
        -(2**63), -(2**63) + 1, -(2**53) - 1, -(2**62 + 2**54 + 1), -1, 0, 1, 257,
        65520, 2**24 + 1, 0x1010001, 2**31 - 1, 2**31, 2**32 + 1, 2**40 + 2**32 + 1,
        2**53 + 1, 2**60 + 2**36 + 1, 2**62 + 2**54 + 1, 0x0123456789ABCDEF,
        2**63 - 1,
    ],
    "uint8": [0, 1, 127, 128, 129, 254, 255],
    "bool": [0, 1],
}  # fmt: skip


def _from_bits(bits, dtype):
    width = torch.finfo(dtype).bits
    signed = [b - (1 << width) if b >= 1 << (width - 1) else b for b in bits]
    return torch.tensor(signed, dtype=BITS_DTYPE[width // 8]).view(dtype)


def inputs(name: str) -> torch.Tensor:
    """The edge values of source dtype ``name``, on the CPU (deterministic)."""
    dtype = DTYPES[name]
    if name in _INT_VALUES:
        return torch.tensor(_INT_VALUES[name], dtype=torch.int64).to(dtype)
    bits, values = {
        "float32": (_FP32_BITS, _FP32_VALUES),
        "float16": (_FP16_BITS, _FP16_VALUES),
        "bfloat16": (_BF16_BITS, _BF16_VALUES),
    }[name]
    exact = torch.tensor(values, dtype=torch.float64)
    held = exact.to(dtype)
    assert torch.equal(held.double(), exact), f"a {name} edge value is not exact"
    return torch.cat([_from_bits(bits, dtype), held])


def to_bits(t: torch.Tensor) -> list[int]:
    """Bit patterns of ``t`` as unsigned ints (a bool's raw byte)."""
    t = t.cpu()
    if t.dtype is torch.bool:
        return [int(v) for v in t.view(torch.uint8).tolist()]
    width = t.element_size() * 8
    raw = t.view(BITS_DTYPE[t.element_size()]) if t.is_floating_point() else t
    return [int(v) & ((1 << width) - 1) for v in raw.tolist()]


def c_undefined(src: torch.Tensor, dst: torch.dtype) -> list[bool]:
    """Per element of ``src``: is its conversion to the integer type ``dst`` one that
    C leaves undefined (C11 6.3.1.4: NaN, +-inf, a truncation outside dst's range)?"""
    if not src.is_floating_point() or dst.is_floating_point or dst is torch.bool:
        return [False] * src.numel()
    info = torch.iinfo(dst)
    return [
        not math.isfinite(v) or not info.min <= math.trunc(v) <= info.max
        for v in src.double().flatten().tolist()
    ]


def undefined(src_name: str, dst_name: str, variant: str = "explicit") -> list[int]:
    """Indices of the inputs whose conversion C leaves undefined (:func:`c_undefined`),
    the probe's one exclusion rule.  via_fp32 converts the float32 value; an implicit
    store into a bool pointer converts to int8 (Triton stores ``pointer_type<int1>``
    as ``pointer_type<int8>``)."""
    dst, src = DTYPES[dst_name], inputs(src_name)
    if variant == "via_fp32":
        src = src.to(torch.float32)
    if dst is torch.bool and variant != "explicit":
        dst = torch.int8
    return [i for i, bad in enumerate(c_undefined(src, dst)) if bad]


# ------------------------------------------------------------------------- kernels


def run_source(src_name: str, device) -> dict[str, dict[str, list[int]]]:
    """{dst name: {variant: bits}} for one source dtype (one launch, every dst)."""
    import triton

    # (imported here: under the interpreter, after the emulation patched Triton)
    from copyfix.measure._probe_kernels import probe_kernel

    src = inputs(src_name).to(device)
    n = src.numel()
    outs = {
        (dst, v): torch.zeros(n, dtype=dtype, device=device)
        for v in VARIANTS
        for dst, dtype in DTYPES.items()
    }
    ptrs = [outs[dst, v] for v in VARIANTS for dst in DTYPES]
    probe_kernel[(1,)](src, *ptrs, n, BLOCK=triton.next_power_of_2(n))
    return {dst: {v: to_bits(outs[dst, v]) for v in VARIANTS} for dst in DTYPES}


def probe(device) -> dict:
    """Every (src, dst) pair: the kernel's bits, torch's bits, the undefined inputs."""
    pairs = {}
    on_gpu = torch.device(device).type != "cpu"
    for src_name in DTYPES:
        measured = run_source(src_name, device)
        src = inputs(src_name)
        for dst_name, dst in DTYPES.items():
            entry = dict(measured[dst_name])
            entry["torch_cpu"] = to_bits(src.to(dst))
            if on_gpu:
                entry["torch_device"] = to_bits(src.to(device).to(dst))
            entry["undefined"] = {v: undefined(src_name, dst_name, v) for v in VARIANTS}
            pairs[f"{src_name}->{dst_name}"] = entry
    return pairs


def versions(device, numpy: bool = False) -> dict:
    """torch, triton (numpy), python, the GPU and CUDA versions of a record."""
    import triton

    out = {"torch": torch.__version__, "triton": triton.__version__}
    if numpy:
        try:
            import numpy as np

            out["numpy"] = np.__version__
        except ImportError:
            out["numpy"] = None
    on_gpu = torch.device(device).type == "cuda"
    gpu = torch.cuda.get_device_name(device) if on_gpu else None
    return {
        **out,
        "python": platform.python_version(),
        "gpu": gpu,
        "cuda": torch.version.cuda,
    }


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--mode", choices=("auto", "compiled", "interpreter"),
        default="auto",
        help="auto: compiled on a CUDA GPU (unless TRITON_INTERPRET=1), else interpreter")  # fmt: skip
    args = parser.parse_args(argv)
    mode = args.mode
    if mode == "auto":
        gpu = torch.cuda.is_available() and not interpreting()
        mode = "compiled" if gpu else "interpreter"
    if mode == "interpreter":
        from copyfix import emulation

        emulation.activate("cpu")  # TRITON_INTERPRET=1 and the conversion patches
        device = "cpu"
    elif interpreting():
        parser.error("compiled mode: unset TRITON_INTERPRET")
    else:
        device = "cuda"
    record = {
        "source": "device" if mode == "compiled" else "interpreter-provisional",
        "op_independent": "the toolchain's own dtype conversions (Triton kernels of this "
        "probe, no FlagGems op): a property of the versions named",
        "mode": mode,
        "versions": versions(device, numpy=True),
        "dtypes": list(DTYPES),
        "variants": list(VARIANTS),
        "inputs": {name: to_bits(inputs(name)) for name in DTYPES},
        "pairs": probe(device),
    }
    records.write(args.out, record)
    differ = [p for p, e in record["pairs"].items() if any(
        a != b and i not in e["undefined"]["explicit"]
        for i, (a, b) in enumerate(zip(e["explicit"], e["torch_cpu"])))]  # fmt: skip
    print(f"{mode} ({record['source']}): {len(record['pairs'])} pairs -> {args.out}")
    print(f"explicit .to() differs from torch (NaN payloads included): {differ}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
