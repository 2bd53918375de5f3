"""PR 3, the per-signature launch cache of pointwise_dynamic: export metadata
(harness only).

Read by copyfix.export.  The PR adds one module and edits upstream's two
pointwise_dynamic.py files (generic and the KunlunXIN fork) and ops/where.py
through the patches kept beside their tree paths (``<file>.patch``), applied to a
known pre-image.
It merges alone: neither PR 1 nor PR 2 is needed, and neither needs it.
"""

MODULE = "src/flag_gems/utils/launch_cache.py"
PATCHED = [
    "src/flag_gems/utils/pointwise_dynamic.py",
    "src/flag_gems/runtime/backend/_kunlunxin/utils/pointwise_dynamic.py",
    "src/flag_gems/ops/where.py",
]
FILES = [MODULE, "tests/test_launch_cache.py"]
BRANCH = "utils/pointwise-launch-cache"
