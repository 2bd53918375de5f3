"""PR 4, the KunlunXIN _to_copy's dtype conversions: export metadata (harness only).

Read by copyfix.export, which makes this PR's branch from these files alone (PR 1, the
KunlunXIN strided copy_, and PR 2, the generic copy_ and _to_copy, are separate
branches; none imports from another).  Text: docs/PR4.md.
"""

NAME = "kunlunxin_to_copy"
PREIMAGE_PATH = "src/flag_gems/runtime/backend/_kunlunxin/ops/to.py"
FILES = [
    PREIMAGE_PATH,
    "tests/test_to_copy_conversions.py",
]
BRANCH = "kunlunxin/to-copy-dtype-conversions"
COMMIT_MESSAGE = """[KUNLUNXIN] _to_copy: convert dtypes as torch does

The KunlunXIN _to_copy (Tensor.to, .bool(), .half(), ...) stored its source
into the output and let the store convert, which is not torch's conversion
for several dtype pairs: x.bool() of 0.5 gave False, float32 -> uint8 of
-1.5 gave 0 (torch: 255), int32 -> bfloat16 of 16842753 gave 16908288
(torch: 16777216).

_to_copy now picks the kernel by dtype pair: nonzero -> True for bool;
float -> uint8 through int64; anything -> bfloat16 through float32, rounded
to nearest even on the float32 bits in the kernel; float64 -> float16
through float32. Conversions to or from float8 go to aten. bfloat16 on
either side runs with the interleave pass off.

TRITONXPU_BF16_FAST is no longer set around the launch: it was a
process-wide variable (other threads' compilations saw it), and the result
no longer depends on how an f32 -> bf16 store is lowered.
TRITONXPU_ELEMBYTES stays for 8-byte outputs (no codegen option carries
it), restored to the caller's value afterwards.

Adds tests/test_to_copy_conversions.py: bfloat16 rounding from every source
dtype (ties, overflow, NaN, subnormals), the reported cases, three layouts,
compared bit for bit with torch.
"""
