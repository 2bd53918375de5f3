"""PR export: copy.patch in sync and applicable, `make pr` onto a synthetic FlagGems checkout."""

import subprocess
from pathlib import Path

import pytest

from copyfix import compose, export

pytestmark = pytest.mark.harness

PRE_COMMIT = """\
repos:
- repo: local
  hooks:
  - id: flake8
    args: ["--ignore=F405,E731,W503,E203,E701,E704", --max-line-length=120]
  - id: isort
    args: ["--profile", "black"]
  - id: black
"""


def git(repo, *args):
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


# Stand-ins for upstream's test and benchmark files (which this repository must not
# hold): their imports, and a function ending in the context lines PR 1's patch
# appends after, so that the exported file parses and passes upstream's lint.
_STAND_IN_HEAD = {
    "tests/test_copy.py": (
        "import pytest\nimport torch\n\nimport flag_gems\n\n"
        "from . import accuracy_utils as utils\n\n\n"
        "def test_stand_in(template, src, ref_out):\n    if template is not None:\n"
    ),
    "benchmark/test_copy.py": (
        "from typing import Generator\n\nimport pytest\nimport torch\n\n"
        "import flag_gems\n\nfrom . import base, consts, utils\n\n\n"
        'def test_stand_in():\n    bench = base.Benchmark(\n        op_name="copy_",\n'
    ),
}


def _stand_in(rel: str) -> str:
    patch = export.PRS["strided-copy"].patch_file(rel).read_text()
    hunk = patch.rsplit("@@", 1)[1].splitlines(keepends=True)[1:]
    context = [line[1:] for line in hunk if line.startswith(" ")]
    return _STAND_IN_HEAD[rel] + "".join(context)


@pytest.fixture
def upstream(tmp_path, monkeypatch):
    """A FlagGems-shaped git repo from the kept base, with stand-ins (known pre-images
    here) for upstream's tests/test_copy.py and benchmark/test_copy.py."""
    import flag_gems

    for var in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{var}_NAME", "ci")
        monkeypatch.setenv(f"GIT_{var}_EMAIL", "ci@example.com")
    repo = tmp_path / "FlagGems"
    compose.decompose(Path(flag_gems.__file__).parent, repo / "src" / "flag_gems")
    target = repo / export.COPY_PY  # (the stack is written against main's)
    target.write_text(export.main_shaped_copy(target.read_text()))
    table = export._copyfix_table()
    for rel in ("tests/test_copy.py", "benchmark/test_copy.py"):
        (repo / rel).parent.mkdir(exist_ok=True)
        (repo / rel).write_text(_stand_in(rel))
        table["preimages"][rel] = [compose.sha256(repo / rel)]
    monkeypatch.setattr(export, "_copyfix_table", lambda: table)
    (repo / ".pre-commit-config.yaml").write_text(PRE_COMMIT)
    git(tmp_path, "init", "-q", "-b", "master", str(repo))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo


def test_copy_patch_is_in_sync_with_the_overlay():
    assert export.patch_path().read_text() == export.make_patch(
        export.base_copy_text()
    ), "run `make patch`"


def test_copy_patch_applies_to_the_base(upstream):
    patch = export.PATCHES["main-2026-08-21"]  # (the fixture's copy.py is main's)
    git(upstream, "apply", "--check", str(patch))
    git(upstream, "apply", str(patch))
    assert (upstream / export.COPY_PY).read_text() == (
        export.REPO / export.COPY_PY
    ).read_text()


def test_make_pr_commits_pr1_as_the_patches_alone(upstream):
    base = git(upstream, "rev-parse", "HEAD").strip()
    pre = (upstream / export.COPY_PY).read_text()
    sha = export.export_pr(upstream, ["strided-copy"])["strided-copy"]
    pr = export.PRS["strided-copy"]
    assert git(upstream, "rev-parse", "--abbrev-ref", "HEAD").strip() == pr.branch
    assert git(upstream, "log", "-1", "--format=%s", sha).startswith("[KUNLUNXIN] ")
    assert git(upstream, "rev-parse", sha + "^").strip() == base  # one commit
    changed = git(upstream, "show", "--name-only", "--format=", sha).split()
    assert sorted(changed) == sorted(pr.patched)
    patch = pr.patch_file(export.COPY_PY)
    expected = compose.apply_patch(pre, patch.read_text(), patch.name)
    assert (upstream / export.COPY_PY).read_text() == expected
    # PR 1 is small: at most 60 changed lines in the op file, on either era
    for p in (patch, pr.patch_file(export.COPY_PY, head=True)):
        assert export.changed_lines(p) <= 60, (p.name, export.changed_lines(p))
    tests = pr.patch_file("tests/test_copy.py").read_text().splitlines()
    assert len([x for x in tests if x.startswith("+") and x[:3] != "+++"]) <= 100


def test_make_pr_refuses_an_unknown_pre_image(upstream):
    target = upstream / export.COPY_PY
    target.write_text(target.read_text() + "\n# a later upstream change\n")
    git(upstream, "commit", "-q", "-am", "drift")
    with pytest.raises(SystemExit, match="not a known pre-image"):
        export.export_pr(upstream, ["strided-copy"])
    assert git(upstream, "rev-parse", "--abbrev-ref", "HEAD").strip() == "master"


def test_make_pr_exports_the_stack_in_order(upstream):
    base = git(upstream, "rev-parse", "HEAD").strip()
    shas = export.export_pr(upstream)
    assert list(shas) == list(export.PRS)  # merge order
    for name, sha in shas.items():
        pr = export.PRS[name]
        assert git(upstream, "rev-parse", pr.branch).strip() == sha
        parent = git(upstream, "rev-parse", sha + "^").strip()
        # one commit, on the branch of the PR it needs, else on the base
        expected = shas[pr.needs[-1]] if pr.needs else base
        assert parent == expected, name
        changed = git(upstream, "show", "--name-only", "--format=", sha).split()
        assert changed and set(changed) <= set(pr.changed)  # nothing of another PR
        message = git(upstream, "log", "-1", "--format=%B", sha)
        assert message.rstrip() + "\n" == pr.message
    # the top of the stack holds the fork's files: what the composer laid over the base
    import flag_gems

    pkg = Path(flag_gems.__file__).parent
    tops = {"alias-snapshot": "files", "conversions": "files"}
    tops.update({"where": "patched", "launch-cache": "patched"})
    for name, kind in tops.items():
        for rel in getattr(export.PRS[name], kind):
            if rel.startswith("src/"):
                shown = git(upstream, "show", f"{shas[name]}:{rel}")
                assert shown == (pkg / rel.removeprefix("src/flag_gems/")).read_text()


def test_the_stack_is_well_formed():
    names = list(export.PRS)
    for n, (name, pr) in enumerate(export.PRS.items(), 1):
        assert pr.n == n and pr.text == f"docs/PR{n}.md"
        assert all(names.index(need) < names.index(name) for need in pr.needs)
        for rel in pr.files:
            assert (export.REPO / rel).is_file(), rel
        for rel in pr.patched:
            assert pr.patch_file(rel).is_file(), rel
    kunlunxin = ["strided-copy", "conversions", "python-scalar", "alias-snapshot"]
    assert export.with_needs("alias-snapshot") == kunlunxin


def test_the_kunlunxin_stages_chain_to_the_fork_s_files(upstream):
    # PR 1 to PR 3's patches, in order, on the base's copy.py give the overlay's
    # copy.py (PR 4 leaves it); on nothing, strided_copy.py's give the file PR 4's
    # aliasing change completes
    texts = {export.COPY_PY: (upstream / export.COPY_PY).read_text()}
    texts[export.STRIDED_COPY_PY] = ""
    for name in ("strided-copy", "conversions", "python-scalar"):
        pr = export.PRS[name]
        for rel in texts:
            patch = pr.patch_file(rel)
            if rel in pr.patched:
                texts[rel] = compose.apply_patch(texts[rel], patch.read_text(), rel)
    assert texts[export.COPY_PY] == (export.REPO / export.COPY_PY).read_text()
    final = (export.REPO / export.STRIDED_COPY_PY).read_text()
    assert texts[export.STRIDED_COPY_PY] != final
    assert "_must_read_src_first" in final
    assert "_must_read_src_first" not in texts[export.STRIDED_COPY_PY]


@pytest.mark.parametrize("name", sorted(export.PRS))
def test_commit_message_is_the_pr_text_itself(name):
    # its title, a blank line, then the rest verbatim (pr.message checks the template)
    pr = export.PRS[name]
    lines = (export.REPO / pr.text).read_text().rstrip("\n").splitlines()
    assert pr.message == f"{lines[0][2:]}\n\n" + "\n".join(lines[1:]).strip("\n") + "\n"
    for private in ("results/", "copyfix", "make ", "harness", "docs/"):
        assert private not in "\n".join(lines), private  # nothing a maintainer lacks


PR_TEXT = """# [KUNLUNXIN] A later PR

### PR Category
Operator

### Type of Change
Bug Fix

### Description
A paragraph, kept as written.
#1151 starts this line: an issue reference, not a heading.

### Issue
#1151

### Progress
- [x] Change is fully covered by a UT.

### Performance
| case | before | after |
|---|---:|---:|
| a row | 2.0 | 1.0 |
"""


def test_a_later_pr_text_plugs_in(tmp_path):
    # docs/PR5.md and later: one PR(...) entry, its message from its own text
    (tmp_path / "PR5.md").write_text(PR_TEXT)
    title, _, body = PR_TEXT.partition("\n")
    assert export.commit_message(tmp_path / "PR5.md") == (
        f"{title[2:]}\n\n{body.strip()}\n"
    )
    pr = export.PR("later", ["x.py"], "later/branch", "docs/PR1.md")
    assert pr.message == export.commit_message(export.REPO / "docs" / "PR1.md")


REFUSED = {
    "no-title": (PR_TEXT.replace("# [KUNLUNXIN] A later PR\n", ""), "title"),
    "renamed-heading": (
        PR_TEXT.replace("### Issue", "### Summary"),
        "template headings",
    ),
    "reordered": (
        PR_TEXT.replace("### Issue\n#1151\n\n", "").replace(
            "### Performance", "### Issue\n#1151\n\n### Performance"
        ),
        "template headings",
    ),
    "too-long": (PR_TEXT + "more\n" * 15, "at most 30 lines"),
    "long-performance": (PR_TEXT + "a line\n" * 3, "Performance section"),
}


@pytest.mark.parametrize("text, refused", REFUSED.values(), ids=REFUSED)
def test_a_pr_text_outside_the_template_is_refused(tmp_path, text, refused):
    (tmp_path / "PR.md").write_text(text)
    with pytest.raises(SystemExit, match=refused):
        export.commit_message(tmp_path / "PR.md")
