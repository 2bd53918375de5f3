"""Upstream's per-PR CI for the exported PRs, on the emulated KunlunXIN runner.

Harness file (not part of the upstream PR).  ``make upstream-ci UPSTREAM=<checkout>``:

    python -m copyfix.upstream.ci <checkout> --mode cpu|cuda [--label L] [--pr NAME ...]
        [--results PATH] [--machine TEXT] [--no-docs] [--test-copy quick|full|none]
        [--file PATH ...] [--timeout S] [--log-dir DIR]
    python -m copyfix.upstream.ci --docs-only   # rewrite the block in docs/UPSTREAM_CHECK.md

What a PR labelled ``vendor/Kunlunxin`` gets upstream: ``tools/test-op.sh`` on the
``kunlunxin`` runner with ``CHANGED_FILES`` = the PR's files.  Here, for each PR (default:
every PR in ``copyfix.export.PRS``), on its own temporary copy of the checkout (src, tests,
benchmark, tools and the top-level pytest/packaging files; the checkout itself is never
written to) with that PR applied by ``export.apply_pr``:

* the checkout's own ``tools/test-op.sh`` runs once per PR file (``CHANGED_FILES=<file>``),
  cwd = the copy, with ``PYTHONPATH=<copy>/src:<repo>/harness[:inherited]`` (the copy's
  flag_gems is the one imported), ``PYTEST_ADDOPTS="-p copyfix.upstream.plugin"``,
  ``COPYFIX_EMULATION=<mode>`` and ``COPYFIX_UPSTREAM_FAULT=1`` (the device model,
  ``emulation.xpu_device_model``, on for every pytest session), and ``PATH`` starting with
  this interpreter's bin folder, then ``$UPSTREAM_CI_PATH_PREPEND``.  The script runs under
  ``bash -x`` only so that every pytest command it runs is traced into the log: that is how
  each pytest run's counts are matched to its command.  ``COLUMNS`` is widened so pytest's
  short summary keeps whole failure reasons.  Nothing else differs from upstream's CI.
* upstream's ``tests/test_copy.py`` runs as test-op.sh would run it (``pytest -s FILE`` and
  ``pytest -s FILE --ref=cpu --quick``, without ``-x`` so the counts are complete) on that
  copy and on a pristine copy (without any PR); each failure gets a reason class
  (``upstream_check.REASON_PATTERNS``: ``xpu-fault`` is the missing strided kernel,
  ``invalid device function``).

Results: ``results/upstream_ci_<mode>.json`` (one section per base label, other bases kept)
and a block between ``<!-- upstream-ci -->`` markers in ``docs/UPSTREAM_CHECK.md``.
Bad input (no checkout, not a FlagGems checkout, no ``tools/test-op.sh``, an unknown
pre-image, a base the emulation does not know, no ``coverage``) stops with one line and
exit code 2 before anything is copied or run.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import importlib.util
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from copyfix.upstream import check as upstream_check

REPO = upstream_check.REPO
RESULTS = upstream_check.RESULTS
DOCS = upstream_check.DOCS
PLUGIN = upstream_check.PLUGIN
TEST_OP = "tools/test-op.sh"
TEST_COPY = "tests/test_copy.py"
BEGIN, END = upstream_check.CI_BLOCK_BEGIN, upstream_check.CI_BLOCK_END
# what test-op.sh and pytest need from a checkout (everything else is left behind)
COPY_DIRS = ("src", "tests", "benchmark", "tools")
COPY_TOP_FILES = (
    "pytest.ini",
    "conftest.py",
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "tox.ini",
    ".coveragerc",
)
COVERAGE_SPEC = "coverage==7.10.7"
PATH_PREPEND_ENV = "UPSTREAM_CI_PATH_PREPEND"
TAIL = 1500
DEFAULT_TIMEOUT = 1800  # seconds per test-op.sh invocation / pytest run


class InputError(SystemExit):
    """Bad input: exit code 2, ``str()`` is the one-line reason."""

    def __init__(self, message: str):
        super().__init__(2)
        self.message = message.splitlines()[0] if message else "bad input"

    def __str__(self) -> str:
        return self.message


# ------------------------------------------------------------------ pytest output


_SUMMARY = re.compile(r"^=+ (?P<body>.*?\bin [\d.]+s\b.*?) =+\s*$")
_COUNT = re.compile(
    r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected|warnings?|rerun)"
)
_FAILURE = re.compile(r"^(FAILED|ERROR) (\S+)(?: - (.*))?$")
# Reason classes of this tool, tried before upstream_check.REASON_PATTERNS: upstream's
# benchmark/base.py times with the device's timers, which Triton's interpreter lacks.
CI_REASON_PATTERNS = (
    ("emulation-limit", r"'InterpreterDriver' object has no attribute"),
)


def reason_class(text: str | None) -> str:
    for name, pattern in CI_REASON_PATTERNS:
        if text and re.search(pattern, text):
            return name
    return upstream_check.reason_class(text)


def parse_summary(text: str) -> dict | None:
    """Counts from pytest's last summary line in ``text`` (``== 3 passed, 1 failed in 2.0s ==``).

    None when there is none (pytest stopped before a session summary, e.g. a usage error).
    ``errors`` sums ``error``/``errors``; ``no tests ran`` is all zeros.
    """
    body = None
    for line in text.splitlines():
        m = _SUMMARY.match(line.strip())
        if m:
            body = m.group("body")
    if body is None:
        return None
    counts = dict.fromkeys(("passed", "failed", "skipped", "errors"), 0)
    for n, word in _COUNT.findall(body):
        key = "errors" if word.startswith("error") else word.rstrip("s")
        if key == "warning":
            key = "warnings"
        counts[key] = counts.get(key, 0) + int(n)
    m = re.search(r"\bin ([\d.]+)s\b", body)
    counts["seconds"] = float(m.group(1)) if m else None
    counts["line"] = body
    return counts


def parse_failures(text: str) -> list[dict]:
    """``FAILED``/``ERROR`` lines of pytest's short test summary: nodeid, first line of reason."""
    out = []
    for line in text.splitlines():
        m = _FAILURE.match(line.rstrip())
        if m:
            reason = (m.group(3) or "").strip()
            out.append(
                {
                    "nodeid": m.group(2),
                    "outcome": "failed" if m.group(1) == "FAILED" else "error",
                    "reason": reason[:300],
                    "reason_class": reason_class(reason),
                }
            )
    return out


# a pytest command in bash's xtrace of test-op.sh (top level: one '+')
_TRACED = re.compile(
    r"^\+ ((?:coverage run .*-m pytest|pytest|python\S* -m pytest)\b.*)$"
)


def split_runs(log: str) -> list[dict]:
    """The pytest runs of one traced test-op.sh log: command, counts, failures, each.

    A run is the text from its traced command to the next traced pytest command (or the
    end).  Other trace lines are not part of any run's text.
    """
    runs: list[dict] = []
    current: list[str] | None = None
    command = None

    def close():
        if command is not None:
            text = "\n".join(current)
            runs.append(_run_record(command, text))

    for line in log.splitlines():
        m = _TRACED.match(line)
        if m:
            close()
            command, current = m.group(1), []
        elif current is not None and not line.startswith("+"):
            current.append(line)
    close()
    return runs


def _run_record(command: str, text: str) -> dict:
    summary = parse_summary(text)
    counts = {k: (summary or {}).get(k, 0) for k in ("passed", "failed", "skipped")}
    counts["errors"] = (summary or {}).get("errors", 0)
    rec = {"command": command, **counts}
    rec["summary"] = summary["line"] if summary else None
    rec["pytest_seconds"] = summary["seconds"] if summary else None
    if summary is None:
        rec["note"] = "no pytest summary line: it stopped before a session summary"
        rec["last_lines"] = _clean_tail(text, 400)
    rec["failures"] = parse_failures(text)
    rec["registration_errors"] = registration_errors(text)
    return rec


_REGISTRATION = re.compile(r"Skipped registering operator: (.*)$", re.M)


def registration_errors(text: str) -> list[str]:
    """FlagGems' swallowed registration errors (``Skipped registering operator: ...``),
    each once.  One naming ``copy_`` means FlagGems' copy_ never ran in that session:
    e.g. on torch 2.11 a second Python kernel for aten::copy_ on the same key is refused
    while the device model's is registered."""
    return sorted({m.strip()[:300] for m in _REGISTRATION.findall(text)})


def _clean_tail(text: str, n: int = TAIL) -> str:
    """The last ``n`` characters of ``text`` without bash's trace lines and warning noise."""
    keep = [
        re.sub(r"([=_!-])\1{9,}", r"\1\1\1", line)  # pytest's rules, COLUMNS wide
        for line in text.splitlines()
        if not line.startswith("+") and line.strip() != "warnings.warn("
    ]
    return "\n".join(keep)[-n:]


def sum_runs(runs: list[dict]) -> dict:
    return {
        k: sum(r[k] for r in runs) for k in ("passed", "failed", "skipped", "errors")
    }


# ------------------------------------------------------------------ validation


def validate(args) -> dict:
    """Every check before anything is copied or run; raises InputError (exit 2)."""
    from copyfix import emulation, export

    checkout = Path(args.checkout).expanduser()
    if not checkout.exists():
        raise InputError(f"no such checkout: {checkout}")
    if not checkout.is_dir():
        raise InputError(f"not a directory: {checkout}")
    try:
        checkout = upstream_check.check_checkout(checkout)
    except SystemExit as e:
        raise InputError(str(e.code)) from None
    if not (checkout / TEST_OP).is_file():
        raise InputError(
            f"{checkout} has no {TEST_OP} (upstream's per-PR test script), so there is "
            "no per-PR CI to run"
        )
    names = list(args.pr or export.PRS)
    unknown = [n for n in names if n not in export.PRS]
    if unknown:
        raise InputError(
            f"unknown PR {', '.join(unknown)} (known: {', '.join(export.PRS)})"
        )
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
    if args.file:
        chosen = {f for fs in prs.values() for f in fs}
        stray = [f for f in args.file if f not in chosen]
        if stray:
            raise InputError(f"--file {stray[0]} is not a file of PR {', '.join(prs)}")
    if args.mode in ("cpu", "cuda"):
        base = emulation.flag_gems_base(checkout / "src" / "flag_gems")
        if base is None:
            raise InputError(
                f"copyfix.emulation does not know the FlagGems base in {checkout} "
                f"(it knows {', '.join(emulation.FLAGGEMS_BASES)}, by file hashes)"
            )
    if args.test_copy != "none" and not (checkout / TEST_COPY).is_file():
        raise InputError(f"{checkout} has no {TEST_COPY} (pass --test-copy none)")
    results = (
        Path(args.results)
        if args.results
        else RESULTS / f"upstream_ci_{args.mode}.json"
    )
    if results.is_dir():
        raise InputError(f"--results {results} is a directory")
    if results.is_file():
        try:
            json.loads(results.read_text())
        except ValueError:
            raise InputError(f"{results} is not JSON; move it away first") from None
    path = run_path()
    tools = {}
    for tool in ("coverage", "pytest"):
        found = shutil.which(tool, path=path)
        if found is None and importlib.util.find_spec(tool) is None:
            hint = (
                f"pip install {COVERAGE_SPEC}"
                if tool == "coverage"
                else "pip install pytest"
            )
            raise InputError(
                f"{tool} is neither on PATH nor importable (test-op.sh runs `{tool}`): {hint}"
            )
        tools[tool] = found
    return {
        "checkout": checkout,
        "label": args.label or upstream_check.checkout_label(checkout),
        "prs": prs,
        "results": results,
        "tools": tools,
    }


# ------------------------------------------------------------------ environment


def run_path() -> str:
    """PATH for the runs: this interpreter's bin folder, $UPSTREAM_CI_PATH_PREPEND, PATH."""
    extra = [p for p in os.environ.get(PATH_PREPEND_ENV, "").split(os.pathsep) if p]
    rest = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    return os.pathsep.join([os.path.dirname(sys.executable), *extra, *rest])


def make_shims(folder: Path, tools: dict) -> dict:
    """``coverage``/``pytest`` scripts running this interpreter's module, for a tool that
    is importable here but has no script on PATH (e.g. installed with ``--target``)."""
    made = {}
    for tool, found in tools.items():
        if found is None:
            folder.mkdir(parents=True, exist_ok=True)
            script = folder / tool
            script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m {tool} "$@"\n')
            script.chmod(0o755)
            made[tool] = str(script)
    return made


def run_env(tree: Path, mode: str, out: Path | None, shims: Path | None) -> dict:
    env = dict(os.environ)
    inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(
        [str(tree / "src"), str(REPO / "harness"), *inherited]
    )
    path = run_path()
    env["PATH"] = f"{shims}{os.pathsep}{path}" if shims else path
    for name in (
        "TRITON_INTERPRET",  # the plugin's activation decides
        "COPYFIX_UPSTREAM_SELECT",
        "COPYFIX_UPSTREAM_PER_TEST",
        "COPYFIX_UPSTREAM_OUT",
        "PYTEST_ADDOPTS",
        "CHANGED_FILES",
    ):
        env.pop(name, None)
    env.update(
        PYTEST_ADDOPTS=f"-p {PLUGIN}",
        COPYFIX_EMULATION=mode,
        COPYFIX_UPSTREAM_FAULT="1",
        COLUMNS="400",
    )
    if mode == "cpu":  # the per-process address-space cap of upstream-check's cpu mode
        env["COPYFIX_UPSTREAM_MEM_GB"] = str(upstream_check.MEM_GB_PER_PROCESS)
    if out is not None:
        env["COPYFIX_UPSTREAM_OUT"] = str(out)
    return env


def _git(*args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(
            ["git", "-C", str(REPO), *args], capture_output=True, text=True
        )
    except OSError:  # no git (a tree that travelled without it)
        return None


def github_sha() -> str:
    """This repository's HEAD (test-op.sh only needs 7+ characters)."""
    done = _git("rev-parse", "HEAD")
    sha = done.stdout.strip() if done and done.returncode == 0 else ""
    return sha if len(sha) >= 7 else "0000000upstreamci"


def copy_checkout(checkout: Path, dest: Path) -> Path:
    """What test-op.sh and pytest need from the checkout, under ``dest``."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".git")
    dest.mkdir(parents=True)
    for name in COPY_DIRS:
        if (checkout / name).is_dir():
            shutil.copytree(checkout / name, dest / name, ignore=ignore, symlinks=True)
    for name in COPY_TOP_FILES:
        if (checkout / name).is_file():
            shutil.copy2(checkout / name, dest / name)
    return dest


class Budget:
    """Seconds each run may take: ``--timeout`` per run, within ``--budget`` for the base."""

    def __init__(self, timeout: float | None, budget: float | None):
        self.timeout = timeout or None
        self.end = time.monotonic() + budget if budget else None

    def limit(self) -> float | None:
        """Seconds for the next run (None: no limit; 0: the budget is spent)."""
        if self.end is None:
            return self.timeout
        left = self.end - time.monotonic()
        if left < 1:
            return 0
        return min(self.timeout, left) if self.timeout else left


NOT_RUN = "not run: the --budget for this base was spent"


def _call(cmd: list[str], cwd: Path, env: dict, log: Path, timeout: float) -> tuple:
    """Run ``cmd`` (its own process group), output to ``log``; (rc, seconds, timed_out)."""
    started = time.monotonic()
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=timeout or None)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc, timed_out = 124, True
    return rc, round(time.monotonic() - started, 1), timed_out


def _meta(out: Path, tree: Path) -> dict:
    """What the plugin recorded about the flag_gems that was imported (last session)."""
    if not out.is_file():
        return {}
    meta = json.loads(out.read_text())["meta"]
    for key in ("flag_gems", "copy_module"):
        p = Path(meta.get(key) or "")
        if p.is_absolute() and p.is_relative_to(tree):
            meta[key] = f"<copy>/{p.relative_to(tree)}"
    return meta


# ------------------------------------------------------------------------- runs


def run_test_op(tree, pr, rel, *, mode, sha, shims, budget, work, log_dir, n) -> dict:
    out = work / f"invocation-{n}.json"
    env = run_env(tree, mode, out, shims)
    env.update(CHANGED_FILES=rel, GITHUB_SHA=sha)
    cmd = ["bash", "-x", TEST_OP, pr]
    command = f"CHANGED_FILES={rel} GITHUB_SHA={sha} {shlex.join(cmd)}"
    timeout = budget.limit()
    if timeout == 0:
        return {
            "pr": pr,
            "file": rel,
            "command": command,
            "rc": None,
            **dict.fromkeys(("passed", "failed", "skipped", "errors", "seconds"), 0),
            "pytest_runs": [],
            "note": NOT_RUN,
        }
    log = work / f"invocation-{n}.log"
    print(f"[upstream-ci] {pr}: CHANGED_FILES={rel} bash -x {TEST_OP} {pr}", flush=True)
    rc, seconds, timed_out = _call(cmd, tree, env, log, timeout)
    text = log.read_text(errors="replace")
    if log_dir:
        shutil.copy(log, Path(log_dir) / f"test-op-{pr}-{n}.log")
    runs = split_runs(text)
    rec = {
        "pr": pr,
        "file": rel,
        "command": command,
        "rc": rc,
        **sum_runs(runs),
        "seconds": seconds,
        "timed_out": timed_out,
        "pytest_runs": runs,
    }
    if not runs:
        rec["note"] = (
            "test-op.sh ran no pytest for this file: it runs only changed test (and, on "
            "main, benchmark) files"
        )
    if timed_out:
        rec["note"] = f"killed after {timeout:.0f} s (--timeout / --budget)"
    meta = _meta(out, tree)
    if meta:  # the plugin's record of the last pytest session: what was imported
        rec["imported"] = {k: meta.get(k) for k in ("flag_gems", "copy_module")}
        rec["versions"] = meta.get("versions")
    rec["log_tail"] = _clean_tail(text)
    print(
        f"[upstream-ci]   rc {rc}, {rec['passed']} passed, {rec['failed']} failed, "
        f"{rec['skipped']} skipped, {rec['errors']} errors; {len(runs)} pytest runs; {seconds} s",
        flush=True,
    )
    return rec


def test_copy_commands(which: str) -> list[list[str]]:
    quick = ["pytest", "-s", TEST_COPY, "--ref=cpu", "--quick"]
    if which == "quick":
        return [quick]
    if which == "full":
        return [["pytest", "-s", TEST_COPY], quick]
    return []


def run_test_copy(tree, cmd, *, pr, mode, shims, budget, work, log_dir, n) -> dict:
    timeout = budget.limit()
    if timeout == 0:
        return {
            "pr": pr,
            "command": shlex.join(cmd),
            "rc": None,
            **dict.fromkeys(("passed", "failed", "skipped", "errors", "seconds"), 0),
            "failures": [],
            "failure_classes": {},
            "note": NOT_RUN,
        }
    out = work / f"test-copy-{n}.json"
    env = run_env(tree, mode, out, shims)
    log = work / f"test-copy-{n}.log"
    print(
        f"[upstream-ci] test_copy ({pr or 'without PR'}): {shlex.join(cmd)}", flush=True
    )
    rc, seconds, timed_out = _call(cmd, tree, env, log, timeout)
    text = log.read_text(errors="replace")
    if log_dir:
        shutil.copy(log, Path(log_dir) / f"test-copy-{pr or 'without'}-{n}.log")
    rec = {"pr": pr, **_run_record(shlex.join(cmd), text), "rc": rc}
    rec.update(seconds=seconds, timed_out=timed_out)
    if timed_out:
        rec["note"] = f"killed after {timeout:.0f} s (--timeout / --budget)"
    if out.is_file():  # the plugin's records: whole failure reasons, the copy calls
        data = json.loads(out.read_text())
        bad = {
            nodeid: r
            for nodeid, r in sorted(data["records"].items())
            if r["outcome"] in ("failed", "error")
        }
        rec["failures"] = [
            {
                "nodeid": nodeid,
                "outcome": r["outcome"],
                "reason": (
                    (r.get("reason") or "").splitlines()[0][:300]
                    if r.get("reason")
                    else ""
                ),
                "reason_class": reason_class(r.get("reason")),
            }
            for nodeid, r in bad.items()
        ]
        rec["copy_calls"] = sum(
            r.get("copy_calls", 0) for r in data["records"].values()
        )
        rec["meta"] = _meta(out, tree)
    rec["failure_classes"] = _classes(rec["failures"])
    rec["registration_errors"] = registration_errors(text)
    rec["log_tail"] = _clean_tail(text)
    print(
        f"[upstream-ci]   rc {rc}, {rec['passed']} passed, {rec['failed']} failed, "
        f"{rec['skipped']} skipped; {rec['failure_classes'] or 'no failures'}; {seconds} s",
        flush=True,
    )
    return rec


def _classes(failures: list[dict]) -> dict:
    out: dict[str, int] = {}
    for f in failures:
        out[f["reason_class"]] = out.get(f["reason_class"], 0) + 1
    return dict(sorted(out.items()))


def _pr_files(names) -> dict:
    """sha256 of each PR file as run, and whether it differs from the committed one."""
    from copyfix import export

    out = {}
    for name in names:
        pr = export.PRS[name]
        for rel in pr.kept_files():
            path = export.REPO / rel
            done = _git("status", "--porcelain", "--", rel)
            ok = done is not None and done.returncode == 0
            out[rel] = {
                "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                "uncommitted": bool(done.stdout.strip()) if ok else None,
            }
    return out


def _tool_version(env: dict, tool: str) -> str | None:
    done = subprocess.run(
        [tool, "--version"], env=env, capture_output=True, text=True, timeout=120
    )
    text = (done.stdout + done.stderr).strip()
    m = re.search(r"(\d+\.\d+(?:\.\d+)?)", text)
    return m.group(1) if m else None


def run_base(v: dict, args) -> dict:
    """Every invocation for one checkout; the base's section of the results."""
    from copyfix import export

    checkout, prs = v["checkout"], v["prs"]
    sha = github_sha()
    started = time.monotonic()
    if args.log_dir:
        Path(args.log_dir).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="copyfix-upstream-ci-"))
    invocations, with_pr, without_pr = [], [], []
    n = 0
    try:
        shims = work / "shims"
        made = make_shims(shims, v["tools"])
        shims = shims if made else None
        probe_env = run_env(work, args.mode, None, shims)
        versions = {
            "python": platform.python_version(),
            "coverage": _tool_version(probe_env, "coverage"),
        }
        budget = Budget(args.timeout, args.budget)
        common = dict(mode=args.mode, shims=shims, budget=budget, work=work)
        for name, files in prs.items():
            tree = copy_checkout(checkout, work / f"pr-{name}")
            applied = export.apply_stack(tree, name)
            for other in getattr(args, "with_prs", None) or ():
                if other != name:  # composed with it, as a merged tree would hold both
                    applied += export.apply_pr(tree, other)
            print(
                f"[upstream-ci] {v['label']}: PR {name} applied: {', '.join(applied)}"
            )
            for rel in files:
                n += 1
                invocations.append(
                    run_test_op(
                        tree, name, rel, sha=sha, log_dir=args.log_dir, n=n, **common
                    )
                )
            for cmd in test_copy_commands(args.test_copy):
                n += 1
                with_pr.append(
                    run_test_copy(
                        tree, cmd, pr=name, log_dir=args.log_dir, n=n, **common
                    )
                )
        if args.test_copy != "none":
            tree = copy_checkout(checkout, work / "pristine")
            for cmd in test_copy_commands(args.test_copy):
                n += 1
                without_pr.append(
                    run_test_copy(
                        tree, cmd, pr=None, log_dir=args.log_dir, n=n, **common
                    )
                )
        for rec in with_pr + without_pr + invocations:
            found = rec.get("meta", {}).get("versions") or rec.get("versions")
            if found:
                versions.update(found)
                break
        else:
            versions.update(_probe_versions(work, args.mode, shims))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ident = upstream_check._op_identity()
    section = {
        "base": v["label"],
        "checkout": str(checkout),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "mode": args.mode,
        "machine": args.machine or upstream_check._machine(),
        "op_commit": ident["op_commit"],
        "op_sha256": ident["op_sha256"],
        "versions": versions,
        "prs": {name: files for name, files in prs.items()},
        "composed_with": list(getattr(args, "with_prs", None) or []),
        "pr_files": _pr_files(prs),
        "test_op_sha256": hashlib.sha256((checkout / TEST_OP).read_bytes()).hexdigest(),
        "tools": {**v["tools"], **{k: f"shim: {sys.executable} -m {k}" for k in made}},
        "env": {
            "PYTHONPATH": f"<copy>/src:{REPO / 'harness'}[:inherited PYTHONPATH]",
            "PYTEST_ADDOPTS": f"-p {PLUGIN}",
            "COPYFIX_EMULATION": args.mode,
            "COPYFIX_UPSTREAM_FAULT": "1",
            "PATH": f"{os.path.dirname(sys.executable)}:${PATH_PREPEND_ENV}:$PATH",
            "GITHUB_SHA": sha,
        },
        "invocations": invocations,
        "test_copy": {
            "which": args.test_copy,
            "without_pr": without_pr,
            "with_pr": with_pr,
        },
        "wall_s": round(time.monotonic() - started, 1),
    }
    return section


def _probe_versions(work: Path, mode: str, shims) -> dict:
    """copyfix.emulation's versions from a child in the runs' environment (no test_copy run)."""
    tree = (
        work / "pristine" if (work / "pristine").is_dir() else next(work.glob("pr-*"))
    )
    env = run_env(tree, mode, None, shims)
    code = (
        "import json; from copyfix import emulation; emulation.activate(); "
        "print('VERSIONS=' + json.dumps(emulation.versions()))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True
    )
    m = re.search(r"^VERSIONS=(.*)$", done.stdout, re.M)
    return json.loads(m.group(1)) if m else {"probe_error": done.stderr[-300:]}


# ------------------------------------------------------------------ results, docs


def keep_other_prs(old: dict | None, new: dict) -> dict:
    """A run of some PRs (``--pr``) keeps the base's records of the other PRs.

    Those records keep what their own run was: each carried invocation and
    ``tests/test_copy.py`` run gets ``run`` (its date and op commit) unless it has one.
    The new run's records, and its run without any PR, replace the old ones.
    """
    if not old:
        return new
    kept = [pr for pr in old.get("prs", {}) if pr not in new.get("prs", {})]
    if not kept:
        return new
    stamp = {"date": old["date"], "op_commit": old.get("op_commit")}

    def carried(records):
        return [dict(r, run=r.get("run", stamp)) for r in records if r["pr"] in kept]

    kept_files = {f for pr in kept for f in old["prs"][pr]}
    merged = dict(new)
    merged["prs"] = {**{pr: old["prs"][pr] for pr in kept}, **new.get("prs", {})}
    merged["pr_files"] = {
        **{f: v for f, v in old.get("pr_files", {}).items() if f in kept_files},
        **new.get("pr_files", {}),
    }
    merged["invocations"] = carried(old["invocations"]) + new["invocations"]
    old_tc, new_tc = old.get("test_copy") or {}, new.get("test_copy") or {}
    if old_tc or new_tc:
        merged["test_copy"] = dict(
            new_tc or old_tc,
            with_pr=carried(old_tc.get("with_pr", [])) + new_tc.get("with_pr", []),
            without_pr=new_tc.get("without_pr", old_tc.get("without_pr", [])),
        )
    return merged


def _unreached(record: dict) -> bool:
    """Whether a run's budget left ``record`` without a result: not run at all, or
    killed (``--timeout`` / ``--budget``) before any test finished."""
    if record.get("rc") is None:
        return True
    done = record.get("passed") or record.get("failed") or record.get("errors")
    return bool(record.get("timed_out")) and not done


def carry_unreached(old: dict | None, new: dict) -> dict:
    """``new`` with each record its run did not reach replaced by ``old``'s record of
    the same invocation (same PR and file; for tests/test_copy.py, same PR and
    command), stamped with the run it comes from (``run``, as keep_other_prs does)
    and saying what replaced it. Records ``old`` lacks stay as the new run left them."""
    if not old:
        return new
    stamp = {"date": old["date"], "op_commit": old.get("op_commit")}

    def carry(records, previous, key):
        earlier = {key(r): r for r in previous}
        out = []
        for r in records:
            e = earlier.get(key(r))
            if _unreached(r) and e is not None and not _unreached(e):
                why = r.get("note") or f"rc {r.get('rc')}"
                e = dict(e, run=e.get("run", stamp))
                e["carried_because"] = f"the {new['date']} run did not reach it ({why})"
                r = e
            out.append(r)
        return out

    merged = dict(new)
    merged["invocations"] = carry(
        new.get("invocations", []),
        old.get("invocations", []),
        lambda r: (r["pr"], r["file"]),
    )
    old_tc, new_tc = old.get("test_copy") or {}, new.get("test_copy") or {}
    if new_tc.get("which") == "none" and old_tc:  # (--test-copy none: none of it ran)
        prs = set(new.get("prs", {}))

        def stamped(records):
            return [dict(r, run=r.get("run", stamp)) for r in records]

        with_pr = [r for r in old_tc.get("with_pr", []) if r["pr"] in prs]
        merged["test_copy"] = dict(
            old_tc,
            with_pr=stamped(with_pr),
            without_pr=stamped(old_tc.get("without_pr", [])),
        )
    elif new_tc:
        merged["test_copy"] = dict(new_tc)
        for side in ("with_pr", "without_pr"):
            merged["test_copy"][side] = carry(
                new_tc.get(side, []),
                old_tc.get(side, []),
                lambda r: (r.get("pr"), r["command"]),
            )
    return merged


def write_results(path: Path, label: str, section: dict) -> dict:
    """Merge one base's section into ``path`` (other bases kept; records this run's
    budget did not reach keep their earlier result); atomic (temp + rename)."""
    data = json.loads(path.read_text()) if path.is_file() else {}
    bases = dict(data.get("bases", {}))
    old = bases.get(label)
    bases[label] = keep_other_prs(old, carry_unreached(old, section))
    data = {
        "mode": section["mode"],
        "machine": section["machine"],
        "op_commit": section["op_commit"],
        "bases": dict(sorted(bases.items())),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(data, indent=1) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return data


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_block(results_dir: Path | None = None) -> str:
    results_dir = results_dir or RESULTS
    lines = [
        BEGIN,
        "## Upstream's per-PR CI (`tools/test-op.sh`), emulated KunlunXIN runner",
        "",
        "Generated by `python -m copyfix.upstream.ci` (`make upstream-ci UPSTREAM=<checkout>`) "
        "from `results/upstream_ci_<mode>.json`. Each PR is applied to its own copy of the "
        "checkout; the checkout's own `tools/test-op.sh` runs once per PR file "
        "(`CHANGED_FILES=<file>`) with the KunlunXIN device model on "
        "(`COPYFIX_UPSTREAM_FAULT=1`); `bash -x` only traces the pytest commands it runs. "
        "Upstream's `tests/test_copy.py` runs with and without the PR, without `-x`.",
        "",
    ]
    for path in sorted(results_dir.glob("upstream_ci_*.json")):
        data = json.loads(path.read_text())
        for label, sec in data.get("bases", {}).items():
            lines += _block_section(label, sec)
    lines.append(END)
    return "\n".join(lines) + "\n"


def _rc(rc) -> str:
    return "not run" if rc is None else str(rc)


def _pr_cell(record: dict) -> str:
    """The PR's name, and the run a record was carried from (keep_other_prs)."""
    return _run_suffix(record["pr"], record)


def _run_suffix(name: str, record: dict) -> str:
    """``name``, and the run ``record`` was carried from, if it was."""
    run = record.get("run")
    if not run:
        return name
    return f"{name} (run {run['date']}, op `{(run['op_commit'] or '?')[:7]}`)"


def _block_section(label: str, sec: dict) -> list[str]:
    v = sec.get("versions") or {}
    lines = [
        f"### {label}, {sec['mode']} mode",
        "",
        f"{sec['date']}, {sec['machine']}; torch {v.get('torch')}, triton {v.get('triton')}, "
        f"coverage {v.get('coverage')}; op `{(sec.get('op_commit') or 'not recorded')[:12]}`; "
        f"wall {sec['wall_s']} s."
        + (
            f" Every PR's tree also holds PR {', '.join(sec['composed_with'])} (`--with`)."
            if sec.get("composed_with")
            else ""
        ),
        "",
        "| PR | file | pytest run by test-op.sh | rc | passed | failed | skipped | s |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for inv in sec["invocations"]:
        runs = inv["pytest_runs"]
        inv = dict(inv, pr=_pr_cell(inv))
        if not runs:
            what = (
                inv.get("note")
                if inv["rc"] is None
                else "nothing: this test-op.sh runs no pytest for this file"
            )
            lines.append(
                f"| {inv['pr']} | `{inv['file']}` | {what} | {_rc(inv['rc'])} | 0 | 0 | 0 "
                f"| {inv['seconds']} |"
            )
            continue
        for i, run in enumerate(runs):
            last = i == len(runs) - 1
            fails = "; ".join(
                f"`{f['nodeid'].split('::', 1)[-1]}` ({f['reason_class']})"
                for f in run["failures"][:2]
            )
            what = f"`{_cell(run['command'])}`" + (f": {fails}" if fails else "")
            if run.get("summary") is None:
                what += " (no pytest summary)"
            secs = (
                f"{run['pytest_seconds']} in pytest"
                if run.get("pytest_seconds")
                else ""
            )
            if last:
                secs += f"{'; ' if secs else ''}{inv['seconds']} in all"
            lines.append(
                f"| {inv['pr'] if i == 0 else ''} | {('`' + inv['file'] + '`') if i == 0 else ''} "
                f"| {what} | {inv['rc'] if last else ''} | {run['passed']} | {run['failed']} "
                f"| {run['skipped']} | {secs} |"
            )
        if inv.get("timed_out"):
            lines.append(f"| | | {inv['note']} | | | | | |")
    tc = sec.get("test_copy") or {}
    rows = [(_run_suffix("without PR", r), r) for r in tc.get("without_pr", [])] + [
        (f"with {_pr_cell(r)}", r) for r in tc.get("with_pr", [])
    ]
    if rows:
        lines += [
            "",
            "| upstream `tests/test_copy.py` | command | rc | passed | failed | skipped | failures by reason | s |",
            "|---|---|---:|---:|---:|---:|---|---:|",
        ]
        for who, r in rows:
            classes = ", ".join(f"{k} {n}" for k, n in r["failure_classes"].items())
            reasons = sorted(
                {f["reason"] for f in r.get("failures", []) if f["reason"]}
            )
            if reasons:
                classes += (
                    " (" + "; ".join(f"`{_cell(x[:80])}`" for x in reasons[:2]) + ")"
                )
            lines.append(
                f"| {who} | `{r['command']}` | {_rc(r['rc'])} | {r['passed']} | {r['failed']} | "
                f"{r['skipped']} | {classes or 'none'} | {r['seconds']} |"
            )
    blocked = sorted(
        {
            r["command"]
            for r in [
                *(x for inv in sec["invocations"] for x in inv["pytest_runs"]),
                *[r for _, r in rows],
            ]
            if any(
                "copy_'s" in e or " copy_ " in e
                for e in r.get("registration_errors") or []
            )
        }
    )
    if blocked:
        lines += [
            "",
            f"**FlagGems could not register `copy_`** in {len(blocked)} of these pytest runs "
            "(`Skipped registering operator`, in the log): their `copy_` calls reached the "
            "device model, not FlagGems, with or without the PR.",
        ]
    lines.append("")
    return lines


def write_docs(doc: Path | None = None, results_dir: Path | None = None) -> Path:
    """Replace (or append) the marked block in docs/UPSTREAM_CHECK.md; the rest is kept."""
    doc = doc or DOCS
    block = render_block(results_dir)
    text = doc.read_text() if doc.is_file() else ""
    start = text.find(BEGIN)
    end = text.find(END, start) if start >= 0 else -1
    if start >= 0 and end >= 0:
        tail = text[end + len(END) :].lstrip("\n")
        text = text[:start] + block + (("\n" + tail) if tail else "")
    else:
        text = (text.rstrip("\n") + "\n\n" if text else "") + block
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)
    return doc


# ------------------------------------------------------------------------- main


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="copyfix.upstream.ci", description=__doc__.split("\n")[0]
    )
    p.add_argument("checkout", nargs="?", help="FlagGems checkout (src, tests, tools)")
    p.add_argument("--mode", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--label", help="base label (default v<__version__> or folder name)")
    p.add_argument(
        "--pr", nargs="+", help="PR names (default: every PR in copyfix.export.PRS)"
    )
    p.add_argument("--file", nargs="+", help="only these PR files (default: all)")
    p.add_argument(
        "--with",
        dest="with_prs",
        nargs="+",
        help="apply these PRs too, under every PR run (e.g. launch-cache: PRs 1 and 2 "
        "with PR 3 composed)",
    )
    p.add_argument(
        "--results", help="results file (default results/upstream_ci_<mode>.json)"
    )
    p.add_argument("--machine", help="machine description for the report")
    p.add_argument(
        "--no-docs", action="store_true", help="do not touch docs/UPSTREAM_CHECK.md"
    )
    p.add_argument(
        "--test-copy",
        choices=("quick", "full", "none"),
        default="full",
        help=f"{TEST_COPY} with and without the PR: both of test-op.sh's commands (full), "
        "the --ref=cpu --quick one (quick), or none",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help="seconds per test-op.sh invocation or pytest run (0: none); on expiry the "
        "process group is killed and the record says so",
    )
    p.add_argument(
        "--budget",
        type=float,
        help="seconds for all runs of this base; each run gets what is left (and at "
        "most --timeout), runs after that are recorded as not run",
    )
    p.add_argument("--log-dir", help="copy every full log here")
    p.add_argument(
        "--docs-only", action="store_true", help="only rewrite the docs block"
    )
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.docs_only:
        print(f"wrote {write_docs()}")
        return 0
    try:
        if not args.checkout:
            raise InputError(
                "no checkout given (python -m copyfix.upstream.ci <checkout>)"
            )
        v = validate(args)
    except InputError as e:
        print(f"upstream-ci: {e}", file=sys.stderr)
        raise
    section = run_base(v, args)
    write_results(v["results"], v["label"], section)
    if not args.no_docs:
        write_docs()
    for inv in section["invocations"]:
        print(
            f"upstream-ci {v['label']} {inv['pr']} {inv['file']}: rc {inv['rc']}, "
            f"{inv['passed']} passed, {inv['failed']} failed, {inv['skipped']} skipped, "
            f"{len(inv['pytest_runs'])} pytest runs, {inv['seconds']} s"
        )
    for key in ("without_pr", "with_pr"):
        for r in section["test_copy"][key]:
            print(
                f"upstream-ci {v['label']} test_copy {key} ({r['command']}): rc {r['rc']}, "
                f"{r['passed']} passed, {r['failed']} failed, {r['skipped']} skipped; "
                f"{r['failure_classes'] or 'no failures'}"
            )
    print(f"wrote {v['results']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
