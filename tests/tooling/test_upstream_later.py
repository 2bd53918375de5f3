"""copyfix.upstream.later: upstream's later tle_copy-era files, laid into a head-like tree.

The later files themselves stay out of git (.upstream/later/); these tests check the
tool's own parts.
"""

import pytest

from copyfix.upstream import ci as upstream_ci
from copyfix.upstream import later as upstream_later

pytestmark = pytest.mark.harness


def test_later_files_refused_if_missing_else_recorded_with_sha_check(tmp_path):
    (tmp_path / "copy.py").write_text("# a later copy.py\n")
    with pytest.raises(upstream_ci.InputError) as err:
        upstream_later.later_files(tmp_path)
    message = str(err.value)
    assert "tle_copy.py missing" in message
    assert "src/flag_gems/runtime/backend/_kunlunxin/utils/tle_copy.py" in message
    assert "\n" not in message
    # with every file present, each record says whether it is the cited one
    for name in upstream_later.LATER_FILES:
        (tmp_path / name).write_text(f"# not upstream's {name}\n")
    recs = upstream_later.later_files(tmp_path)
    assert sorted(recs) == sorted(
        ["copy.py", "tle_copy.py", "ops_copy.py", "ops_to.py", "kunlunxin_to_head.py"]
    )
    assert not any(r["as_cited"] for r in recs.values())


def test_adaptation_touches_only_contiguous_import(tmp_path):
    rel, old, _ = upstream_later.ADAPTATIONS[0]
    path = tmp_path / rel
    path.parent.mkdir(parents=True)
    path.write_text(f"import torch\n{old}\n\ndef contiguous(inp):\n    return inp\n")
    changed = upstream_later.adapt(tmp_path)
    assert len(changed) == 1 and changed[0].startswith(rel)
    text = path.read_text()
    assert "copy_slice = None" in text and old not in text
    assert text.startswith("import torch\n") and text.endswith("    return inp\n")
    assert upstream_later.adapt(tmp_path) == []  # applied once


def test_copy_module_check_accepts_an_op_file_without_pointwise_kernels():
    # the later file has copy/copy_ but no _copy_kernel; one without copy_ is refused
    import types

    from copyfix.emulation import kunlunxin

    later = types.ModuleType("_kunlunxin.ops.copy")
    later.__file__ = "later/copy.py"
    later.copy = later.copy_ = lambda *args: None
    kunlunxin._check_copy_module(later)
    del later.copy_
    with pytest.raises(RuntimeError, match="has no copy_"):
        kunlunxin._check_copy_module(later)
