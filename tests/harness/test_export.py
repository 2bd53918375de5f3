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


@pytest.fixture
def upstream(tmp_path):
    """A git repo laid out like FlagGems, built from the base the build kept."""
    import flag_gems

    repo = tmp_path / "FlagGems"
    compose.decompose(Path(flag_gems.__file__).parent, repo / "src" / "flag_gems")
    (repo / "tests").mkdir()
    (repo / "benchmark").mkdir()
    (repo / ".pre-commit-config.yaml").write_text(PRE_COMMIT)
    git(tmp_path, "init", "-q", "-b", "master", str(repo))
    git(repo, "-c", "user.email=ci@example.com", "-c", "user.name=ci", "add", "-A")
    git(
        repo,
        "-c",
        "user.email=ci@example.com",
        "-c",
        "user.name=ci",
        "commit",
        "-q",
        "-m",
        "base",
    )
    return repo


def test_copy_patch_is_in_sync_with_the_overlay():
    assert export.patch_path().read_text() == export.make_patch(
        export.base_copy_text()
    ), "run `make patch`"


def test_copy_patch_applies_to_the_base(upstream):
    git(upstream, "apply", "--check", str(export.patch_path()))
    git(upstream, "apply", str(export.patch_path()))
    assert (upstream / export.COPY_PY).read_text() == (
        export.REPO / export.COPY_PY
    ).read_text()


def test_make_pr_commits_the_pr_files_on_a_new_branch(upstream, monkeypatch):
    monkeypatch.setenv("GIT_AUTHOR_NAME", "ci")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "ci@example.com")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "ci")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "ci@example.com")
    before = export.patch_path().read_text()
    base = git(upstream, "rev-parse", "HEAD").strip()
    shas = export.export_pr(upstream, ["kunlunxin"])
    sha = shas["kunlunxin"]
    assert git(upstream, "rev-parse", "--abbrev-ref", "HEAD").strip() == export.BRANCH
    assert git(upstream, "log", "-1", "--format=%s", sha).startswith("[KUNLUNXIN] ")
    message = git(upstream, "log", "-1", "--format=%B", sha)
    assert message.rstrip() + "\n" == export.PRS["kunlunxin"].message
    assert git(upstream, "rev-parse", sha + "^").strip() == base  # one commit
    changed = git(upstream, "show", "--name-only", "--format=", sha).split()
    assert sorted(changed) == sorted(export.PR_FILES)
    for rel in export.PR_FILES:
        assert (upstream / rel).read_bytes() == (export.REPO / rel).read_bytes()
    assert export.patch_path().read_text() == before  # regenerated, unchanged


def test_make_pr_refuses_an_unknown_pre_image(upstream):
    target = upstream / export.COPY_PY
    target.write_text(target.read_text() + "\n# a later upstream change\n")
    git(
        upstream,
        "-c",
        "user.email=ci@example.com",
        "-c",
        "user.name=ci",
        "commit",
        "-qam",
        "drift",
    )
    with pytest.raises(SystemExit, match="not a known pre-image"):
        export.export_pr(upstream, ["kunlunxin"])
    assert git(upstream, "rev-parse", "--abbrev-ref", "HEAD").strip() == "master"


def test_make_pr_exports_each_pr_as_its_own_branch(upstream, monkeypatch):
    for var in ("AUTHOR", "COMMITTER"):
        monkeypatch.setenv(f"GIT_{var}_NAME", "ci")
        monkeypatch.setenv(f"GIT_{var}_EMAIL", "ci@example.com")
    base = git(upstream, "rev-parse", "HEAD").strip()
    shas = export.export_pr(upstream)
    assert sorted(shas) == sorted(export.PRS)
    for name, sha in shas.items():
        pr = export.PRS[name]
        assert git(upstream, "rev-parse", pr.branch).strip() == sha
        assert (
            git(upstream, "rev-parse", sha + "^").strip() == base
        )  # one commit on base
        changed = git(upstream, "show", "--name-only", "--format=", sha).split()
        assert sorted(changed) == sorted(pr.changed)  # and nothing of another PR
        message = git(upstream, "log", "-1", "--format=%B", sha)
        assert message.rstrip() + "\n" == pr.message
    assert not set(export.PRS["generic"].files) & set(export.PRS["kunlunxin"].files)
    # PR 3's edits of upstream files are what the composer applied and the suite ran
    import flag_gems

    pkg = Path(flag_gems.__file__).parent
    patched = export.PRS["launch-cache"].patched
    assert "src/flag_gems/ops/where.py" in patched
    for rel in patched:
        shown = git(upstream, "show", f"{shas['launch-cache']}:{rel}")
        assert shown == (pkg / rel.removeprefix("src/flag_gems/")).read_text(), rel


@pytest.mark.parametrize("name", sorted(export.PRS))
def test_commit_message_is_the_pr_text_itself(name):
    # what a maintainer receives is the PR text: its title, a blank line, then the rest
    # of the file verbatim, in FlagGems' template and within its length
    pr = export.PRS[name]
    lines = (export.REPO / pr.text).read_text().rstrip("\n").splitlines()
    assert pr.message == f"{lines[0][2:]}\n\n" + "\n".join(lines[1:]).strip("\n") + "\n"
    assert len(lines) <= 60
    headings = [line for line in lines if line.startswith("### ")]
    assert headings == [f"### {h}" for h in export.TEMPLATE_HEADINGS]
    assert len(lines) - lines.index("### Performance") <= 12


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
    pr = export.PR("later", ["x.py"], "x.py", "later/branch", "docs/PR.md")
    assert pr.message == export.commit_message(export.REPO / "docs" / "PR.md")


@pytest.mark.parametrize(
    "text, refused",
    [
        (PR_TEXT.replace("# [KUNLUNXIN] A later PR\n", ""), "title"),
        (PR_TEXT.replace("### Issue", "### Summary"), "template headings"),
        (
            PR_TEXT.replace("### Issue\n#1151\n\n", "").replace(
                "### Performance", "### Issue\n#1151\n\n### Performance"
            ),
            "template headings",
        ),
        (PR_TEXT + "more\n" * 45, "at most 60 lines"),
        (PR_TEXT + "a line\n" * 9, "Performance section"),
        (PR_TEXT + "| a row | 2.0 | 1.0 |\n" * 6, "at most 6 rows"),
    ],
    ids=[
        "no-title",
        "renamed-heading",
        "reordered",
        "too-long",
        "long-performance",
        "rows",
    ],
)
def test_a_pr_text_outside_the_template_is_refused(tmp_path, text, refused):
    (tmp_path / "PR.md").write_text(text)
    with pytest.raises(SystemExit, match=refused):
        export.commit_message(tmp_path / "PR.md")
