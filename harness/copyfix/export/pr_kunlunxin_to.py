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
# (its commit message: docs/PR4.md, through copyfix.export.commit_message)
