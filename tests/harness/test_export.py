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
        assert sorted(changed) == sorted(pr.files)  # and nothing of the other PR
    assert not set(export.PRS["generic"].files) & set(export.PRS["kunlunxin"].files)
