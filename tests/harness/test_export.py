"""PR export: copy.patch in sync and applicable, `make pr` onto a synthetic FlagGems checkout."""

import re
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


def _description(text):
    """The words of a PR text's Description section, read independently of export."""
    section = text.split("\n### Description\n", 1)[1]
    return re.split(r"^#{1,6} ", section, maxsplit=1, flags=re.M)[0].split()


@pytest.mark.parametrize("name", sorted(export.PRS))
def test_commit_message_is_the_pr_texts_title_and_description(name):
    # what a reviewer reads first is the PR text itself: its title, a blank line,
    # its Description verbatim (only the line breaks differ), nothing else
    pr = export.PRS[name]
    text = (export.REPO / pr.text).read_text()
    title, blank, *body = pr.message.splitlines()
    assert text.splitlines()[0] == f"# {title}" and blank == ""
    assert " ".join(body).split() == _description(text)
    for line in body:  # wrapped at 72, except table rows and unbreakable words
        assert len(line) <= 72 or line.startswith("|") or " " not in line.strip()
    assert pr.message.endswith("\n") and not pr.message.endswith("\n\n")


PR_TEXT = """# [KUNLUNXIN] A later PR

### PR Category
Operator

### Description
A first paragraph, written on
short lines, that the message rewraps into lines of at most the given width.
#1151 starts this line: an issue reference, not a heading. A `code span` stays whole.

- an item whose text is long enough to wrap onto a second line, indented
- a second item
  continued on an indented line

| case | result |
|---|---|
| a row longer than the width stays whole, as tables must | kept |

### Issue
Not in the message.
"""


def test_a_later_pr_text_plugs_in(tmp_path):
    # docs/PR3.md and later: one PR(...) entry, its message from its own text
    (tmp_path / "PR3.md").write_text(PR_TEXT)
    assert export.commit_message(tmp_path / "PR3.md", width=40) == (
        "[KUNLUNXIN] A later PR\n"
        "\n"
        "A first paragraph, written on short\n"
        "lines, that the message rewraps into\n"
        "lines of at most the given width. #1151\n"
        "starts this line: an issue reference,\n"
        "not a heading. A `code span` stays\n"
        "whole.\n"
        "\n"
        "- an item whose text is long enough to\n"
        "  wrap onto a second line, indented\n"
        "- a second item continued on an indented\n"
        "  line\n"
        "\n"
        "| case | result |\n"
        "|---|---|\n"
        "| a row longer than the width stays whole, as tables must | kept |\n"
    )
    assert export._rewrap(["word `a b c` end"], 10) == ["word", "`a b c`", "end"]
    pr = export.PR("later", ["x.py"], "x.py", "later/branch", "docs/PR.md")
    assert pr.message == export.commit_message(export.REPO / "docs" / "PR.md")


@pytest.mark.parametrize(
    "text, missing",
    [
        (PR_TEXT.replace("# [KUNLUNXIN] A later PR\n", ""), "title"),
        (PR_TEXT.replace("### Description", "### Summary"), "Description"),
    ],
    ids=["no-title", "no-description"],
)
def test_a_pr_text_without_title_or_description_is_refused(tmp_path, text, missing):
    (tmp_path / "PR.md").write_text(text)
    with pytest.raises(SystemExit, match=missing):
        export.commit_message(tmp_path / "PR.md")
