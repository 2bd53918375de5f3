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
# (its commit message: docs/PR2.md, through copyfix.export.commit_message)
