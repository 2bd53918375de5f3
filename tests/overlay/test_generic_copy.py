"""PR 2: the generic copy_ (flag_gems/ops/copy.py), called directly, converts every
dtype pair of generic_conversions over three layouts bit for bit as torch's copy_ (NaN
by class, C-undefined float -> int excluded); the pre-image must differ on the issue
cases, so these tests fail without the PR.
"""

import contextlib
import json
import os
import subprocess
import sys

import pytest

from copyfix import emulation

MODE = emulation.activate()  # before flag_gems (and any kernel) is defined

import torch  # noqa: E402

from copyfix.measure import generic_conversions as gc  # noqa: E402

pytestmark = pytest.mark.harness

RECORDED_H200 = gc.REPO / "results" / "conversions_h200.json"
PAIRS = [f"{s}->{d}" for s in gc.DTYPES for d in gc.DTYPES]


@pytest.fixture(scope="module")
def ops():
    with gc.cpu_device_guard() if MODE == "cpu" else contextlib.nullcontext():
        yield gc.generic_ops()


device = emulation.device


def test_before_is_a_known_base_file_and_after_is_the_overlay(ops):
    assert ops["before_file"]["sha256"] in gc.PREIMAGES
    repo_op = gc.REPO / "src" / "flag_gems" / gc.OP_RELPATH
    assert ops["after_file"]["sha256"] == gc.sha256(repo_op)
    assert ops["before_file"]["sha256"] != ops["after_file"]["sha256"]


@pytest.mark.parametrize("pair", PAIRS)
def test_after_converts_as_torch(ops, pair):
    src_name, dst_name = pair.split("->")
    values = gc.inputs(src_name)
    for layout in gc.LAYOUTS:
        ref, src = gc.layout_pair(values, gc.DTYPES[dst_name], layout, device())
        ref.copy_(src)
        dst = torch.zeros_like(ref)
        ops["after"].copy_(dst, src)
        bad = gc.differing(dst, ref, src)
        assert bad == 0, (
            f"{layout}-{pair}: {bad} of {ref.numel()} elements differ; "
            f"src {src.cpu().tolist()[:12]} got {dst.cpu().tolist()[:12]} "
            f"torch {ref.cpu().tolist()[:12]}"
        )


@pytest.mark.parametrize("op", ["copy_", "to_copy"])
def test_issue_cases_before_differ_after_match(ops, op):
    # copy_'s four cases, or _to_copy's three (its generic op, called directly)
    for row in gc.issue_cases(ops if op == "copy_" else gc.generic_ops(op), device()):
        assert row["after"] == row["torch"], row
        if MODE == "cpu" and row["dst"] == "uint8":
            # The interpreter stores a negative float into uint8 as numpy does
            # (wrapping), so here the pre-image happens to agree with torch.  Its
            # kernel is a plain store, whose conversion the H200 recorded
            # (results/conversions_h200.json, "implicit"): -1.5 -> 0, torch's 255.
            assert row["before"] == row["torch"], row
            record = json.loads(RECORDED_H200.read_text())["pairs"]["float32->uint8"]
            i = gc.inputs("float32").tolist().index(-1.5)
            assert (record["implicit"][i], record["torch_device"][i]) == (0, 255)
            continue
        assert row["before"] != row["torch"], row


def test_float8_conversions_go_to_aten_and_same_dtype_copies_stay(ops):
    can = ops["after"]._can_use_triton
    f32 = torch.zeros(4, device=device())
    for name in ("float8_e4m3fn", "float8_e5m2"):
        f8 = torch.zeros(4, dtype=gc.DTYPES[name], device=device())
        assert not can(f8, f32) and not can(f32, f8)
        assert can(f8, torch.zeros_like(f8))
    assert can(torch.zeros(4, dtype=torch.bool, device=device()), f32)


def test_kernel_choice(ops):
    op = ops["after"]

    def kernel(src_dtype, dst_dtype):
        src = torch.zeros(2, dtype=src_dtype, device=device())
        return op.kernel_for(torch.zeros(2, dtype=dst_dtype, device=device()), src)

    assert kernel(torch.float32, torch.bool) is op._to_bool_kernel
    assert kernel(torch.bool, torch.bool) is op._copy_kernel
    assert kernel(torch.float16, torch.uint8) is op._float_to_uint8_kernel
    assert kernel(torch.int8, torch.uint8) is op._copy_kernel
    assert kernel(torch.uint64, torch.bfloat16) is op._int_to_bf16_kernel
    assert kernel(torch.float64, torch.float16) is op._through_fp32_kernel
    assert kernel(torch.float64, torch.bfloat16) is op._through_fp32_kernel
    assert kernel(torch.float32, torch.bfloat16) is op._copy_kernel


# Compiled Triton, without a GPU: the PTX (sm_90) of each kernel as pointwise_dynamic
# runs it (load, scalar function, converting store), in a child without the interpreter.
PTX_PAIRS = [
    "float32->bool", "int16->bool", "float64->bool", "int32->bfloat16",
    "int64->bfloat16", "uint64->bfloat16", "float32->uint8", "bfloat16->uint8",
    "float64->uint8", "float64->float16", "float64->bfloat16",
]  # fmt: skip


def _ptx(path, plan, tmp_path):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(gc.REPO / "harness")
    cmd = [sys.executable, "-m", "copyfix.measure.generic_conversions"]
    cmd += ["--ptx", str(path), str(plan_file)]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_compiled_conversions_before_and_after(ops, tmp_path):
    plan = {}
    for pair in PTX_PAIRS:
        src, dst = (torch.zeros(1, dtype=gc.DTYPES[n]) for n in pair.split("->"))
        plan[pair] = ops["after"].kernel_for(dst, src)._scalar_fn.__name__
    after = _ptx(ops["after_file"]["path"], plan, tmp_path)
    before = _ptx(
        ops["before_file"]["path"], dict.fromkeys(PTX_PAIRS, "_copy_kernel"), tmp_path
    )
    # the pre-image: one rounding / a saturating or int8 conversion, all unlike torch
    assert "cvt.rzi.s16.f32" in before["float32->bool"]  # the int8 store: 0.5 -> 0
    assert "cvt.rn.bf16.s32" in before["int32->bfloat16"]
    assert "cvt.rn.bf16.s64" in before["int64->bfloat16"]
    assert "cvt.rzi.u16.f32" in before["float32->uint8"]  # saturates: -1.5 -> 0
    assert "cvt.rn.f16.f64" in before["float64->float16"]
    assert "cvt.rn.bf16.f64" in before["float64->bfloat16"]
    # after: torch's routes
    for pair, cvts in after.items():
        src, dst = pair.split("->")
        if dst == "bool":
            assert not [c for c in cvts if c.startswith("cvt.rzi")], (pair, cvts)
        if dst == "uint8":
            assert [c for c in cvts if c.startswith("cvt.rzi.s64.")], (pair, cvts)
            assert not [c for c in cvts if c.startswith("cvt.rzi.u")], (pair, cvts)
        if dst == "bfloat16" and not src.startswith("float"):
            assert not [c for c in cvts if c.startswith("cvt.rn.bf16.")], (pair, cvts)
            assert [c for c in cvts if c.startswith("cvt.rn.f32.")], (pair, cvts)
        if src == "float64" and dst in ("float16", "bfloat16"):
            short = "f16" if dst == "float16" else "bf16"
            assert {"cvt.rn.f32.f64", f"cvt.rn.{short}.f32"} <= set(cvts), (pair, cvts)


@pytest.mark.parametrize(
    "dst_dtype, src_dtype",
    [
        (torch.bool, torch.float32),
        (torch.bfloat16, torch.int32),
        (torch.uint8, torch.float32),
        (torch.float16, torch.float64),
    ],
    ids=str,
)
@pytest.mark.parametrize("shapes", [((3, 4), (5, 4)), ((4,), (2, 4))], ids=str)
def test_bad_input_raises_as_torch_and_leaves_dst_untouched(
    ops, dst_dtype, src_dtype, shapes
):
    # PR 2 changes which kernel converts, never the checks before it: the generic op's
    # own broadcast checks (their text is the generic op's, as before the PR) still
    # raise torch's error type before anything is written, on every new kernel's path
    dst_shape, src_shape = shapes
    ref = torch.zeros(dst_shape, dtype=dst_dtype)
    src = torch.ones(src_shape, dtype=src_dtype)
    with pytest.raises(RuntimeError):
        ref.copy_(src)
    dst = torch.zeros(dst_shape, dtype=dst_dtype, device=device())
    texts = []
    for op in (ops["before"], ops["after"]):
        with pytest.raises(RuntimeError) as raised:
            op.copy_(dst, src.to(device()))
        texts.append(str(raised.value))
        assert torch.equal(dst.cpu(), ref)
    assert texts[0] == texts[1]  # the equal-shape fast path left the text alone
