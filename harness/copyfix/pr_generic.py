"""PR 2, the generic copy_'s dtype conversions: export metadata (harness only).

Read by copyfix.export, which makes this PR's branch from these files alone (PR 1,
the KunlunXIN strided copy_, is a separate branch; neither imports from the other).
"""

PREIMAGE_PATH = "src/flag_gems/ops/copy.py"
FILES = [
    PREIMAGE_PATH,
    "src/flag_gems/ops/to.py",  # _to_copy: the same conversion kernels (a pre-image too)
    "tests/test_copy_dtype_conversions.py",
]
BRANCH = "generic/copy-dtype-conversions"
COMMIT_MESSAGE = """[Operator] copy_, _to_copy: convert dtypes as torch does

copy_ stored its source into the destination pointer and let the store
convert, which is not torch's conversion for several dtype pairs. Measured on
an H200 with 5.0.2: float32 -> bool [0.5, -0.25, nan] gave False (torch: True),
int16 -> bool 256 gave False, int32 -> bfloat16 16842753 gave 16908288 (torch:
16777216), float32 -> uint8 -1.5 gave 0 (torch: 255).

copy_ now picks the kernel by dtype pair: nonzero -> True for bool
destinations; float -> uint8 through int64; integers -> bfloat16 through
float32 with the second rounding done on the bit pattern (the compiler folds
int -> float32 -> bfloat16 into one rounding); float64 -> float16/bfloat16
through float32. Conversions to or from float8 go to aten (Triton saturates
where torch overflows to inf, and cannot convert integers to or from
float8). Same-dtype copies are unchanged.

_to_copy (ops/to.py: Tensor.to, .bool(), .half(), ...) stored through the
same identity kernel, with the same defects (x.bool() of 0.5 gave False). It
now runs copy_'s kernels, chosen by the same rules; its checks, fallbacks and
allocation are unchanged.

Adds tests/test_copy_dtype_conversions.py: every pair of ten dtypes with edge
values (integer extremes, rounding ties, +-0, +-inf, NaN, subnormals,
overflow thresholds), strided layouts, and the reported cases, through copy_
and through .to(), compared bit for bit with torch.
"""
