"""The emulation converts between dtypes as compiled Triton does, pinned by a device run.

``results/conversions_h200.json`` (``python -m copyfix.measure.probe_conversions`` on the
H200) holds compiled Triton 3.6's bits for every (src, dst) pair of the KunlunXIN Triton
dtypes, by store (``implicit``), ``.to(dst)`` (``explicit``) and ``.to(float32)`` stored
(``via_fp32``), with torch's.  The same kernels on the active emulation must give them,
bit for bit on every input C defines (``probe.undefined``); a NaN only as a NaN.
"""

import functools
import json
from pathlib import Path

import pytest

from copyfix import emulation

MODE = emulation.activate()  # before flag_gems (and any kernel) is defined

import torch  # noqa: E402

from copyfix.measure import probe_conversions as probe  # noqa: E402

pytestmark = pytest.mark.harness

RECORDED = Path(__file__).resolve().parents[2] / "results" / "conversions_h200.json"

PAIRS = [f"{s}->{d}" for s in probe.DTYPES for d in probe.DTYPES]
FLOAT_BITS = {"float16": (5, 10), "bfloat16": (8, 7), "float32": (8, 23)}

# Where compiled Triton's conversion is not torch's (defined inputs, bool stores aside):
# integers into bfloat16, rounded once by Triton (via_fp32 folded too), twice by torch
# (int -> float32 -> bfloat16); the kunlunxin copy_ rounds the float32 bits by hand.
_BIG = 2**62 + 2**54 + 1
TRITON_NOT_TORCH = {
    "int32->bfloat16": {0x1010001, -0x1010001},
    "int64->bfloat16": {0x1010001, 2**40 + 2**32 + 1, _BIG, -_BIG},
}


@functools.lru_cache(maxsize=None)
def recorded():
    return json.loads(RECORDED.read_text())


@functools.lru_cache(maxsize=None)
def measured(src_name):
    """The probe kernel's bits for one source dtype, on the active emulation."""
    return probe.run_source(src_name, emulation.device())


def is_nan(name, bits):
    if name not in FLOAT_BITS:
        return False
    exponent, mantissa = FLOAT_BITS[name]
    all_ones = (1 << exponent) - 1
    return (bits >> mantissa) & all_ones == all_ones and bits & ((1 << mantissa) - 1)


def mismatches(dst_name, got, expected, skip):
    """[(index, got, expected)] of defined inputs whose results differ (NaN by class)."""
    return [
        (i, hex(a), hex(b))
        for i, (a, b) in enumerate(zip(got, expected))
        if i not in skip
        and a != b
        and not (is_nan(dst_name, a) and is_nan(dst_name, b))
    ]


def signed(bits, name):
    width = 1 if name == "bool" else torch.iinfo(probe.DTYPES[name]).bits
    unsigned = name in ("uint8", "bool")
    return bits - (1 << width) if not unsigned and bits >> (width - 1) else bits


def test_recorded_file_is_a_device_run_of_these_inputs():
    data = recorded()
    # (an "interpreter-provisional" file certifies nothing: the H200 run goes there)
    assert data["source"] == "device" and data["mode"] == "compiled"
    assert data["versions"]["triton"].startswith("3.6.")
    assert "H200" in data["versions"]["gpu"]
    # the record is of exactly the edge values and exclusions the probe has now
    assert data["inputs"] == {n: probe.to_bits(probe.inputs(n)) for n in probe.DTYPES}
    assert sorted(data["pairs"]) == sorted(PAIRS)
    for pair, entry in data["pairs"].items():
        src, dst = pair.split("->")
        for variant in probe.VARIANTS:
            assert entry["undefined"][variant] == probe.undefined(src, dst, variant)


@pytest.mark.parametrize("pair", PAIRS)
def test_emulation_converts_as_compiled_triton(pair):
    src, dst = pair.split("->")
    entry = recorded()["pairs"][pair]
    for variant in probe.VARIANTS:
        bad = mismatches(
            dst,
            measured(src)[dst][variant],
            entry[variant],
            entry["undefined"][variant],
        )
        assert not bad, f"{pair} {variant} ({MODE}): (index, got, device) {bad[:8]}"


def test_where_compiled_triton_differs_from_torch():
    data = recorded()
    found = {}
    for pair, entry in data["pairs"].items():
        src, dst = pair.split("->")
        for variant in probe.VARIANTS:
            if variant != "explicit" and dst == "bool" and src != "bool":
                continue  # the store's int8 byte: the next test
            if variant == "via_fp32" and not (
                dst in ("float16", "bfloat16") and src not in FLOAT_BITS
            ):
                continue  # torch's two steps are integer -> float32 -> 16-bit only
            for i, _, _ in mismatches(
                dst, entry[variant], entry["torch_cpu"], entry["undefined"][variant]
            ):
                found.setdefault(pair, set()).add(signed(data["inputs"][src][i], src))
    assert found == TRITON_NOT_TORCH


def test_store_into_bool_keeps_the_int8_byte():
    # language/semantic.py store: a bool pointer is stored through as int8, so a value
    # is converted to int8 (integers wrap, floats truncate) and that byte is stored:
    # 0x100 -> 0 (False), 0.5 -> 0, 2 -> a byte 2 that torch does not count as True.
    data = recorded()
    for src in probe.DTYPES:
        entry = data["pairs"][f"{src}->bool"]
        skip = entry["undefined"]["implicit"]
        values = probe.inputs(src)
        values = (values.double() if values.is_floating_point() else values).tolist()
        for i, (value, byte) in enumerate(zip(values, entry["implicit"])):
            if i not in skip:
                assert byte == int(value) & 0xFF, (src, value, byte)
        # .to(tl.int1) is `x != 0`, as torch: 0 or 1
        assert entry["explicit"] == entry["torch_cpu"], src
