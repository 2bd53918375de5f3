"""copyfix.upstream.later: upstream's later tle_copy-era copy.py, run in place of ours.

The later files themselves stay out of git (.upstream/later/); these tests check the
tool's own parts and that the recorded results match the tool's cases.
"""

import json

import pytest

from copyfix.upstream import ci as upstream_ci
from copyfix.upstream import later as upstream_later

pytestmark = pytest.mark.harness

RESULTS = upstream_later.REPO / "results" / "upstream_later_cpu.json"


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


def test_cases_run_bit_exact_through_ours(tmp_path):
    # the tool's cases in this process (this repository's composed op): every one
    # runs in Triton, bit-exact against torch on the host, no aten fallback
    out = tmp_path / "cases.json"
    assert upstream_later.run_cases(out) == 0
    data = json.loads(out.read_text())
    assert "import_error" not in data
    import torch

    names = list(upstream_later._cases(torch))
    assert [r["case"] for r in data["cases"]] == names
    for rec in data["cases"]:
        assert rec["outcome"] == "bit-exact", rec
        assert rec["fallbacks"] == 0 and rec["triton_launches"] >= 1, rec


def test_recorded_results_cover_the_tools_cases():
    # results/upstream_later_cpu.json is this tool's output for the cited files
    import torch

    data = json.loads(RESULTS.read_text())
    assert all(f["as_cited"] for f in data["later_files"].values())
    names = list(upstream_later._cases(torch))
    for variant in upstream_later.VARIANTS:
        section = data["variants"][variant]
        assert [r["case"] for r in section["cases"]] == names, variant
        assert [r["command"] for r in section["test_copy"]] == [
            " ".join(cmd) for cmd in upstream_ci.test_copy_commands("full")
        ]


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


def test_ours_holds_the_kunlunxin_stack_up_to_alias_snapshot(tmp_path, monkeypatch):
    # PR 4's patches (tests/test_copy.py.pr4.patch) apply on top of PRs 1-3 only: the
    # "ours" trees apply the stack, not PR 4 alone
    from copyfix import export

    calls = []
    monkeypatch.setattr(upstream_ci, "copy_checkout", lambda c, dest: dest)
    monkeypatch.setattr(export, "apply_stack", lambda t, n: calls.append(n) or [])
    monkeypatch.setattr(export, "apply_pr", lambda *a: pytest.fail("PR 4 alone"))
    tree = upstream_later.make_tree(tmp_path, tmp_path, "ours", tmp_path)
    assert tree == tmp_path / "ours"
    assert calls == ["alias-snapshot"]
