"""upstream-ci's input checks, the tools and environment of its runs, the copies (harness)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from copyfix.upstream.common import (
    PLUGIN,
    REPO,
    RESULTS,
    check_checkout,
    checkout_label,
    pytest_env,
)

TEST_OP = "tools/test-op.sh"
TEST_COPY = "tests/test_copy.py"
# what test-op.sh and pytest need from a checkout (everything else is left behind)
COPY_DIRS = ("src", "tests", "benchmark", "tools")
COPY_TOP_FILES = (
    "pytest.ini",
    "conftest.py",
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
)
COPY_TOP_FILES += ("tox.ini", ".coveragerc")
COVERAGE_SPEC = "coverage==7.10.7"
PATH_PREPEND_ENV = "UPSTREAM_CI_PATH_PREPEND"
DEFAULT_TIMEOUT = 1800  # seconds per test-op.sh invocation / pytest run


class InputError(SystemExit):
    def __init__(self, message: str):
        super().__init__(2)
        self.message = message.splitlines()[0] if message else "bad input"

    def __str__(self) -> str:
        return self.message


def pr_names(given=None) -> list[str]:
    """The PRs ``--pr`` names (default: every PR of the stack); InputError on a name
    that is not one of ``copyfix.export.PRS``."""
    from copyfix import export

    names = list(given or export.PRS)
    if unknown := [n for n in names if n not in export.PRS]:
        known = ", ".join(export.PRS)
        raise InputError(f"unknown PR {', '.join(unknown)} (known: {known})")
    return names


def validate(args) -> dict:
    from copyfix import emulation, export

    checkout = Path(args.checkout).expanduser()
    if not checkout.exists():
        raise InputError(f"no such checkout: {checkout}")
    if not checkout.is_dir():
        raise InputError(f"not a directory: {checkout}")
    try:
        checkout = check_checkout(checkout)
    except SystemExit as e:
        raise InputError(str(e.code)) from None
    if not (checkout / TEST_OP).is_file():
        raise InputError(
            f"{checkout} has no {TEST_OP} (upstream's per-PR test script), so there is "
            "no per-PR CI to run"
        )
    names = pr_names(args.pr)
    prs = {}
    for name in names:
        pr = export.PRS[name]
        missing = [f for f in pr.files if not (export.REPO / f).is_file()]
        missing += [r for r in pr.patched if not pr.patch_file(r).is_file()]
        if missing:
            raise InputError(f"PR {name}: {missing[0]} is missing in {export.REPO}")
        try:
            export.check_preimage(checkout, pr)
        except SystemExit as e:
            raise InputError(str(e.code)) from None
        files = list(pr.changed)  # what CHANGED_FILES names: patched files too
        if args.file:
            files = [f for f in files if f in args.file]
        prs[name] = files
    chosen = {f for fs in prs.values() for f in fs}
    if stray := [f for f in args.file or () if f not in chosen]:
        raise InputError(f"--file {stray[0]} is not a file of PR {', '.join(prs)}")
    if emulation.flag_gems_base(checkout / "src" / "flag_gems") is None:
        raise InputError(
            f"copyfix.emulation does not know the FlagGems base in {checkout} "
            f"(it knows {', '.join(emulation.FLAGGEMS_BASES)}, by file hashes)"
        )
    if args.test_copy != "none" and not (checkout / TEST_COPY).is_file():
        raise InputError(f"{checkout} has no {TEST_COPY} (pass --test-copy none)")
    results = Path(args.results or RESULTS / f"upstream_ci_{args.mode}.json")
    if results.is_dir():
        raise InputError(f"--results {results} is a directory")
    if results.is_file():
        try:
            json.loads(results.read_text())
        except ValueError:
            raise InputError(f"{results} is not JSON; move it away first") from None
    tools = {}
    for tool in ("coverage", "pytest"):
        found = shutil.which(tool, path=run_path())
        if found is None and importlib.util.find_spec(tool) is None:
            spec = COVERAGE_SPEC if tool == "coverage" else tool
            raise InputError(
                f"{tool} is neither on PATH nor importable (test-op.sh runs `{tool}`): "
                f"pip install {spec}"
            )
        tools[tool] = found
    return {
        "checkout": checkout,
        "label": args.label or checkout_label(checkout),
        "prs": prs,
        "results": results,
        "tools": tools,
    }


def run_path() -> str:
    """This interpreter's bin folder, $UPSTREAM_CI_PATH_PREPEND, $PATH."""
    parts = [os.environ.get(k, "") for k in (PATH_PREPEND_ENV, "PATH")]
    rest = [p for part in parts for p in part.split(os.pathsep) if p]
    return os.pathsep.join([os.path.dirname(sys.executable), *rest])


def make_shims(folder: Path, tools: dict) -> dict:
    """Scripts running this interpreter's module, for each tool with no script on PATH."""
    made = {}
    for tool in (t for t, found in tools.items() if found is None):
        folder.mkdir(parents=True, exist_ok=True)
        script = folder / tool
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m {tool} "$@"\n')
        script.chmod(0o755)
        made[tool] = str(script)
    return made


def run_env(tree: Path, mode: str, out: Path | None, shims: Path | None) -> dict:
    path = run_path()
    return pytest_env(
        tree / "src",
        mode,
        out=out,
        PATH=f"{shims}{os.pathsep}{path}" if shims else path,
        PYTEST_ADDOPTS=f"-p {PLUGIN}",
        COLUMNS="400",
    )


def _git(*args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(
            ["git", "-C", str(REPO), *args], capture_output=True, text=True
        )
    except OSError:  # no git (a tree that travelled without it)
        return None


def github_sha() -> str:
    """This repository's HEAD (test-op.sh needs 7+ characters)."""
    done = _git("rev-parse", "HEAD")
    sha = done.stdout.strip() if done and done.returncode == 0 else ""
    return sha if len(sha) >= 7 else "0000000upstreamci"


def copy_checkout(checkout: Path, dest: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".git")
    dest.mkdir(parents=True)
    for name in COPY_DIRS:
        if (checkout / name).is_dir():
            shutil.copytree(checkout / name, dest / name, ignore=ignore, symlinks=True)
    for name in COPY_TOP_FILES:
        if (checkout / name).is_file():
            shutil.copy2(checkout / name, dest / name)
    return dest
