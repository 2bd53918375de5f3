"""Upstream's per-PR CI for the exported PRs, on the emulated KunlunXIN runner.

Harness file (not part of the upstream PR); ``make upstream-ci UPSTREAM=<checkout>``, or
``python -m copyfix.upstream.ci --docs-only`` to rewrite the block in UPSTREAM_CHECK.md.

What a ``vendor/Kunlunxin`` PR gets upstream: ``tools/test-op.sh`` with ``CHANGED_FILES`` =
the PR's files.  Here each PR (default: every one in ``copyfix.export.PRS``) is applied
(``export.apply_stack``) to its own copy of the checkout, and the checkout's own
test-op.sh runs once per PR file under ``bash -x`` (so each traced pytest command is
matched to its counts), the copy's flag_gems first on PYTHONPATH, ``-p
copyfix.upstream.plugin`` and the device model on (``COPYFIX_UPSTREAM_FAULT=1``).
Upstream's ``tests/test_copy.py`` runs as test-op.sh would run it, without ``-x``, with
and without the PR.  Results: ``results/upstream_ci_<mode>.json`` (one section per
base) and a block of ``docs/UPSTREAM_CHECK.md``.  Bad input stops with one line and
exit code 2 before anything is copied or run.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from copyfix import export, records
from copyfix.budget import Budget
from copyfix.upstream import common
from copyfix.upstream.check import CI_BLOCK_BEGIN as BEGIN
from copyfix.upstream.check import CI_BLOCK_END as END

TEST_OP = "tools/test-op.sh"
TEST_COPY = "tests/test_copy.py"
DEFAULT_TIMEOUT = 1800  # seconds per test-op.sh invocation / pytest run
COVERAGE_SPEC = "coverage==7.10.7"
PATH_PREPEND_ENV = "UPSTREAM_CI_PATH_PREPEND"

# ------------------------------------------------------------------ the command


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.docs_only:
        print(f"wrote {write_docs()}")
        return 0
    try:
        if not args.checkout:
            raise InputError("no checkout given (copyfix.upstream.ci <checkout>)")
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


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="copyfix.upstream.ci", description=__doc__.split("\n")[0]
    )
    arg = p.add_argument
    arg("checkout", nargs="?", help="FlagGems checkout (src, tests, tools)")
    arg("--mode", choices=("cpu", "cuda"), default="cpu")
    arg("--label", help="base label (default v<__version__> or folder name)")
    arg("--pr", nargs="+", help="PR names (default: every PR)")
    arg("--file", nargs="+", help="only these PR files (default: all)")
    arg("--with", dest="with_prs", nargs="+",
        help="apply these PRs too, under every PR run")  # fmt: skip
    arg("--results", help="default results/upstream_ci_<mode>.json")
    arg("--machine", help="machine description for the report")
    arg("--no-docs", action="store_true", help="leave the docs as they are")
    arg("--test-copy", choices=("quick", "full", "none"), default="full",
        help=f"{TEST_COPY} with and without the PR: test-op.sh's two commands, "
        "the --ref=cpu --quick one, or none")  # fmt: skip
    arg("--timeout", type=float, default=DEFAULT_TIMEOUT,
        help="seconds per test-op.sh invocation or pytest run (0: none)")  # fmt: skip
    arg("--budget", type=float,
        help="seconds for all runs of this base (runs after that: not run)")  # fmt: skip
    arg("--log-dir", help="copy every full log here")
    arg("--docs-only", action="store_true", help="only rewrite the docs")
    return p.parse_args(argv)


# ------------------------------------------------------------------ validation


class InputError(SystemExit):
    def __init__(self, message: str):
        super().__init__(2)
        self.message = message.splitlines()[0] if message else "bad input"

    def __str__(self) -> str:
        return self.message


def pr_names(given=None) -> list[str]:
    """The PRs ``--pr`` names (default: every PR of the stack); InputError on a name
    that is not one of ``copyfix.export.PRS``."""
    names = list(given or export.PRS)
    if unknown := [n for n in names if n not in export.PRS]:
        known = ", ".join(export.PRS)
        raise InputError(f"unknown PR {', '.join(unknown)} (known: {known})")
    return names


def validate(args) -> dict:
    from copyfix import emulation

    checkout = Path(args.checkout).expanduser()
    if not checkout.exists():
        raise InputError(f"no such checkout: {checkout}")
    if not checkout.is_dir():
        raise InputError(f"not a directory: {checkout}")
    try:
        checkout = common.check_checkout(checkout)
    except SystemExit as e:
        raise InputError(str(e.code)) from None
    if not (checkout / TEST_OP).is_file():
        raise InputError(
            f"{checkout} has no {TEST_OP} (upstream's per-PR test script), so there is "
            "no per-PR CI to run"
        )
    prs = {}
    for name in pr_names(args.pr):
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
    results = Path(args.results or common.RESULTS / f"upstream_ci_{args.mode}.json")
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
    label = args.label or common.checkout_label(checkout)
    return dict(checkout=checkout, label=label, prs=prs, results=results, tools=tools)


def run_path() -> str:
    """This interpreter's bin folder, $UPSTREAM_CI_PATH_PREPEND, $PATH."""
    parts = [os.environ.get(k, "") for k in (PATH_PREPEND_ENV, "PATH")]
    rest = [p for part in parts for p in part.split(os.pathsep) if p]
    return os.pathsep.join([os.path.dirname(sys.executable), *rest])


# ------------------------------------------------------------------ trees

# what test-op.sh and pytest need from a checkout (everything else is left behind)
COPY_DIRS = ("src", "tests", "benchmark", "tools")
COPY_TOP_FILES = ("pytest.ini", "conftest.py", "pyproject.toml", "setup.py")
COPY_TOP_FILES += ("setup.cfg", "tox.ini", ".coveragerc")


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


# ------------------------------------------------------------------ runs

TAIL = 1500
COUNTS = ("passed", "failed", "skipped", "errors")
NOT_RUN = "not run: the --budget for this base was spent"
ZERO = dict.fromkeys((*COUNTS, "seconds"), 0)
_CAPTURE = dict(capture_output=True, text=True)
_FAILURE = re.compile(r"^(FAILED|ERROR) (\S+)(?: - (.*))?$")
# a pytest command in bash's xtrace of test-op.sh (top level: one '+')
_TRACED = re.compile(
    r"^\+ ((?:coverage run .*-m pytest|pytest|python\S* -m pytest)\b.*)$"
)
_REGISTRATION = re.compile(r"Skipped registering operator: (.*)$", re.M)
# Tried first: upstream's benchmark/base.py times with the device's timers, which
# Triton's interpreter lacks.
CI_REASON_PATTERNS = (
    ("emulation-limit", r"'InterpreterDriver' object has no attribute"),
    *common.REASON_PATTERNS,
)


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
    return common.pytest_env(
        tree / "src",
        mode,
        out=out,
        PATH=f"{shims}{os.pathsep}{path}" if shims else path,
        PYTEST_ADDOPTS=f"-p {common.PLUGIN}",
        COLUMNS="400",
    )


def _git(*args: str) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", "-C", str(common.REPO), *args], **_CAPTURE)
    except OSError:  # no git (a tree that travelled without it)
        return None


def github_sha() -> str:
    """This repository's HEAD (test-op.sh needs 7+ characters)."""
    done = _git("rev-parse", "HEAD")
    sha = done.stdout.strip() if done and done.returncode == 0 else ""
    return sha if len(sha) >= 7 else "0000000upstreamci"


def _run(cmd, tree, env, budget, log, keep, say: str) -> tuple | None:
    """``cmd`` for what the budget leaves: (rc, seconds, timed_out, log text, note),
    the log copied to ``keep``; None when the budget is spent."""
    timeout = budget.limit()
    if timeout == 0:
        return None
    print(f"[upstream-ci] {say}", flush=True)
    rc, seconds, timed_out = common.call(cmd, tree, env, log, timeout)
    if keep:
        shutil.copy(log, keep)
    note = f"killed after {timeout:.0f} s (--timeout / --budget)" if timed_out else None
    return rc, seconds, timed_out, log.read_text(errors="replace"), note


def _say_done(rec: dict, tail: str) -> None:
    print(
        f"[upstream-ci]   rc {rec['rc']}, {rec['passed']} passed, {rec['failed']} "
        f"failed, {rec['skipped']} skipped{tail}; {rec['seconds']} s",
        flush=True,
    )


def run_test_op(tree, pr, rel, *, sha, n, mode, shims, budget, work, log_dir) -> dict:
    out = work / f"invocation-{n}.json"
    env = dict(run_env(tree, mode, out, shims), CHANGED_FILES=rel, GITHUB_SHA=sha)
    cmd = ["bash", "-x", TEST_OP, pr]
    command = f"CHANGED_FILES={rel} GITHUB_SHA={sha} {shlex.join(cmd)}"
    rec = {"pr": pr, "file": rel, "command": command}
    keep = log_dir and Path(log_dir) / f"test-op-{pr}-{n}.log"
    say = f"{pr}: CHANGED_FILES={rel} bash -x {TEST_OP} {pr}"
    log = work / f"invocation-{n}.log"
    done = _run(cmd, tree, env, budget, log, keep, say)
    if done is None:
        return {**rec, "rc": None, **ZERO, "pytest_runs": [], "note": NOT_RUN}
    rc, seconds, timed_out, text, killed = done
    runs = split_runs(text)
    rec.update(rc=rc, **sum_runs(runs), seconds=seconds, timed_out=timed_out)
    rec["pytest_runs"] = runs
    if not runs:
        rec["note"] = (
            "test-op.sh ran no pytest for this file: it runs only changed test (and, on "
            "main, benchmark) files"
        )
    if killed:
        rec["note"] = killed
    data = common.read_out(out, tree)
    if data:  # the plugin's record of the last pytest session: what was imported
        meta = data["meta"]
        rec["imported"] = {k: meta.get(k) for k in ("flag_gems", "copy_module")}
        rec["versions"] = meta.get("versions")
    rec["log_tail"] = _clean_tail(text)
    _say_done(rec, f", {rec['errors']} errors; {len(runs)} pytest runs")
    return rec


def test_copy_commands(which: str) -> list[list[str]]:
    quick = ["pytest", "-s", TEST_COPY, "--ref=cpu", "--quick"]
    full = [["pytest", "-s", TEST_COPY], quick]
    return {"quick": [quick], "full": full}.get(which, [])


def run_test_copy(tree, cmd, *, pr, n, mode, shims, budget, work, log_dir) -> dict:
    out = work / f"test-copy-{n}.json"
    keep = log_dir and Path(log_dir) / f"test-copy-{pr or 'without'}-{n}.log"
    env = run_env(tree, mode, out, shims)
    say = f"test_copy ({pr or 'without PR'}): {shlex.join(cmd)}"
    log = work / f"test-copy-{n}.log"
    done = _run(cmd, tree, env, budget, log, keep, say)
    if done is None:
        rec = {"pr": pr, "command": shlex.join(cmd), "rc": None, **ZERO}
        return {**rec, "failures": [], "failure_classes": {}, "note": NOT_RUN}
    rc, seconds, timed_out, text, killed = done
    rec = {"pr": pr, **_run_record(shlex.join(cmd), text), "rc": rc}
    rec.update(seconds=seconds, timed_out=timed_out)
    if killed:
        rec["note"] = killed
    data = common.read_out(out, tree)
    if data:  # the plugin's records: whole failure reasons, the copy calls
        recs = data["records"]
        rec["failures"] = [
            dict(
                nodeid=k,
                outcome=r["outcome"],
                reason=common.first_line(r.get("reason")),
            )
            | {"reason_class": reason_class(r.get("reason"))}
            for k, r in sorted(recs.items())
            if r["outcome"] in ("failed", "error")
        ]
        rec["copy_calls"] = sum(r.get("copy_calls", 0) for r in recs.values())
        rec["meta"] = data["meta"]
    classes = Counter(f["reason_class"] for f in rec["failures"])
    rec["failure_classes"] = dict(sorted(classes.items()))
    rec["registration_errors"] = registration_errors(text)
    rec["log_tail"] = _clean_tail(text)
    _say_done(rec, f"; {rec['failure_classes'] or 'no failures'}")
    return rec


def split_runs(log: str) -> list[dict]:
    """Each traced pytest command of a test-op.sh log: its counts and failures."""
    runs, command, current = [], None, []
    for line in log.splitlines() + ["+ pytest"]:  # (the sentinel closes the last)
        m = _TRACED.match(line)
        if m:
            if command is not None:
                runs.append(_run_record(command, "\n".join(current)))
            command, current = m.group(1), []
        elif command is not None and not line.startswith("+"):
            current.append(line)
    return runs


def _run_record(command: str, text: str) -> dict:
    summary = records.parse_summary(text) or {}
    rec = {"command": command, **{k: summary.get(k, 0) for k in COUNTS}}
    rec["summary"] = summary.get("line")
    rec["pytest_seconds"] = summary.get("seconds")
    if not summary:
        rec["note"] = "no pytest summary line: it stopped before a session summary"
        rec["last_lines"] = _clean_tail(text, 400)
    rec["failures"] = parse_failures(text)
    rec["registration_errors"] = registration_errors(text)
    return rec


def parse_failures(text: str) -> list[dict]:
    out = []
    for m in filter(None, map(_FAILURE.match, map(str.rstrip, text.splitlines()))):
        reason = (m.group(3) or "").strip()
        outcome = "failed" if m.group(1) == "FAILED" else "error"
        out.append({"nodeid": m.group(2), "outcome": outcome, "reason": reason[:300]})
        out[-1]["reason_class"] = reason_class(reason)
    return out


def reason_class(text: str | None) -> str:
    return common.reason_class(text, CI_REASON_PATTERNS)


def registration_errors(text: str) -> list[str]:
    """FlagGems' swallowed registration errors, each once."""
    return sorted({m.strip()[:300] for m in _REGISTRATION.findall(text)})


def _clean_tail(text: str, n: int = TAIL) -> str:
    keep = [
        re.sub(r"([=_!-])\1{9,}", r"\1\1\1", line)  # pytest's rules, COLUMNS wide
        for line in text.splitlines()
        if not line.startswith("+") and line.strip() != "warnings.warn("
    ]
    return "\n".join(keep)[-n:]


def sum_runs(runs: list[dict]) -> dict:
    return {k: sum(r[k] for r in runs) for k in COUNTS}


def _probe_versions(work: Path, mode: str, shims) -> dict:
    """copyfix.emulation's versions from a child in the runs' environment."""
    tree = work / "pristine"
    tree = tree if tree.is_dir() else next(work.glob("pr-*"))
    code = (
        "import json; from copyfix import emulation; emulation.activate(); "
        "print('VERSIONS=' + json.dumps(emulation.versions()))"
    )
    env = run_env(tree, mode, None, shims)
    done = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, **_CAPTURE)
    m = re.search(r"^VERSIONS=(.*)$", done.stdout, re.M)
    return json.loads(m.group(1)) if m else {"probe_error": done.stderr[-300:]}


# ------------------------------------------------------------------ section


def run_base(v: dict, args) -> dict:
    """Every run for one checkout; the base's section of the results."""
    checkout, prs, with_prs = v["checkout"], v["prs"], args.with_prs or []
    sha, started, n = github_sha(), time.monotonic(), itertools.count(1)
    if args.log_dir:
        Path(args.log_dir).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="copyfix-upstream-ci-"))
    invocations, with_pr, without_pr = [], [], []

    def test_copy(tree, pr):
        cmds = test_copy_commands(args.test_copy)
        return [run_test_copy(tree, c, pr=pr, n=next(n), **opts) for c in cmds]

    try:
        made = make_shims(work / "shims", v["tools"])
        shims = work / "shims" if made else None
        probe_env = run_env(work, args.mode, None, shims)
        done = subprocess.run(
            ["coverage", "--version"], env=probe_env, timeout=120, **_CAPTURE
        )
        m = re.search(r"(\d+\.\d+(?:\.\d+)?)", (done.stdout + done.stderr).strip())
        versions = {"python": platform.python_version(), "coverage": m and m.group(1)}
        opts = dict(mode=args.mode, shims=shims, work=work, log_dir=args.log_dir)
        opts["budget"] = Budget(args.budget, timeout=args.timeout)
        for name, files in prs.items():
            tree = copy_checkout(checkout, work / f"pr-{name}")
            applied = export.apply_stack(tree, name, with_prs)
            print(
                f"[upstream-ci] {v['label']}: PR {name} applied: {', '.join(applied)}"
            )
            invocations += [
                run_test_op(tree, name, rel, sha=sha, n=next(n), **opts)
                for rel in files
            ]
            with_pr += test_copy(tree, name)
        if args.test_copy != "none":
            without_pr = test_copy(copy_checkout(checkout, work / "pristine"), None)
        found = (
            r.get("meta", {}).get("versions") or r.get("versions")
            for r in with_pr + without_pr + invocations
        )
        versions |= next(filter(None, found), None) or _probe_versions(
            work, args.mode, shims
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "base": v["label"],
        "checkout": str(checkout),
        **records.stamp(mode=args.mode, machine=args.machine),
        **common.op_identity(),
        "versions": versions,
        "prs": dict(prs),
        "composed_with": list(with_prs),
        "pr_files": _pr_files(prs),
        "test_op_sha256": records.sha256(checkout / TEST_OP),
        "tools": {**v["tools"], **{k: f"shim: {sys.executable} -m {k}" for k in made}},
        "env": {
            "PYTHONPATH": f"<copy>/src:{common.REPO / 'harness'}[:inherited PYTHONPATH]",
            "PYTEST_ADDOPTS": f"-p {common.PLUGIN}",
            "COPYFIX_EMULATION": args.mode,
            "COPYFIX_UPSTREAM_FAULT": "1",
            "PATH": f"{os.path.dirname(sys.executable)}:${PATH_PREPEND_ENV}:$PATH",
            "GITHUB_SHA": sha,
        },
        "invocations": invocations,
        "test_copy": dict(which=args.test_copy, without_pr=without_pr, with_pr=with_pr),
        "wall_s": round(time.monotonic() - started, 1),
    }


def _pr_files(names) -> dict:
    """sha256 of each PR file as run, and whether it differs from the committed one."""
    out = {}
    for rel in (rel for name in names for rel in export.PRS[name].kept_files()):
        done = _git("status", "--porcelain", "--", rel)
        ok = done is not None and done.returncode == 0
        out[rel] = {
            "sha256": records.sha256(export.REPO / rel),
            "uncommitted": bool(done.stdout.strip()) if ok else None,
        }
    return out


# ------------------------------------------------------------------ results file


def write_results(path: Path, label: str, section: dict) -> dict:
    """Merge one base's section into ``path`` (other bases and unreached records kept)."""

    def merge(data):
        bases = dict(data.get("bases", {}))
        old = bases.get(label)
        bases[label] = keep_other_prs(old, carry_unreached(old, section))
        keys = ("mode", "machine", "op_commit", "measured_paths")  # (what it names)
        top = {k: section[k] for k in keys if k in section}
        return {**top, "bases": dict(sorted(bases.items()))}

    return records.update(path, merge)


def _stamped(recs: list[dict], old: dict, keep=lambda r: True) -> list[dict]:
    """``recs`` (those ``keep`` takes) stamped with the run of ``old`` unless they are."""
    stamp = {"date": old["date"], "op_commit": old.get("op_commit")}
    return [dict(r, run=r.get("run", stamp)) for r in recs if keep(r)]


def keep_other_prs(old: dict | None, new: dict) -> dict:
    """A run of some PRs (``--pr``) keeps the base's records of the other PRs."""
    kept = [pr for pr in (old or {}).get("prs", {}) if pr not in new.get("prs", {})]
    if not kept:
        return new
    kept_files = {f for pr in kept for f in old["prs"][pr]}
    old_files = old.get("pr_files", {}).items()
    merged = dict(new)
    merged["prs"] = {**{pr: old["prs"][pr] for pr in kept}, **new.get("prs", {})}
    merged["pr_files"] = {
        **{f: v for f, v in old_files if f in kept_files},
        **new.get("pr_files", {}),
    }
    merged["invocations"] = _stamped(old["invocations"], old, lambda r: r["pr"] in kept)
    merged["invocations"] += new["invocations"]
    old_tc, new_tc = old.get("test_copy") or {}, new.get("test_copy") or {}
    if old_tc or new_tc:
        carried = _stamped(old_tc.get("with_pr", []), old, lambda r: r["pr"] in kept)
        merged["test_copy"] = dict(
            new_tc or old_tc,
            with_pr=carried + new_tc.get("with_pr", []),
            without_pr=new_tc.get("without_pr", old_tc.get("without_pr", [])),
        )
    return merged


def _unreached(record: dict) -> bool:
    """Not run at all, or killed before any test finished."""
    if record.get("rc") is None:
        return True
    done = record.get("passed") or record.get("failed") or record.get("errors")
    return bool(record.get("timed_out")) and not done


def carry_unreached(old: dict | None, new: dict) -> dict:
    """``new`` with each record its run did not reach replaced by ``old``'s record of
    the same run (PR and file, or PR and command), stamped with its run and why."""
    if not old:
        return new

    def carry(new_part, old_part, name, key):
        earlier = {key(r): r for r in old_part.get(name, [])}
        out = []
        for r in new_part.get(name, []):
            e = earlier.get(key(r))
            if _unreached(r) and e is not None and not _unreached(e):
                why = r.get("note") or f"rc {r.get('rc')}"
                (r,) = _stamped([e], old)
                r["carried_because"] = f"the {new['date']} run did not reach it ({why})"
            out.append(r)
        return out

    merged = dict(new)
    merged["invocations"] = carry(
        new, old, "invocations", lambda r: (r["pr"], r["file"])
    )
    old_tc, new_tc = old.get("test_copy") or {}, new.get("test_copy") or {}
    if new_tc.get("which") == "none" and old_tc:  # (--test-copy none: none of it ran)
        prs = set(new.get("prs", {}))
        merged["test_copy"] = dict(
            old_tc,
            with_pr=_stamped(old_tc.get("with_pr", []), old, lambda r: r["pr"] in prs),
            without_pr=_stamped(old_tc.get("without_pr", []), old),
        )
    elif new_tc:
        merged["test_copy"] = dict(new_tc)
        key = lambda r: (r.get("pr"), r["command"])
        for side in ("with_pr", "without_pr"):
            merged["test_copy"][side] = carry(new_tc, old_tc, side, key)
    return merged


# ------------------------------------------------------------------ docs block


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _rc(rc) -> str:
    return "not run" if rc is None else str(rc)


def _run_suffix(name: str, record: dict) -> str:
    """``name``, and the run ``record`` was carried from, if it was."""
    if not (run := record.get("run")):
        return name
    return f"{name} (run {run['date']}, op `{(run['op_commit'] or '?')[:7]}`)"


def render_block(results_dir: Path | None = None) -> str:
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
    for path in sorted((results_dir or common.RESULTS).glob("upstream_ci_*.json")):
        for label, sec in json.loads(path.read_text()).get("bases", {}).items():
            lines += _block_section(label, sec)
    return "\n".join([*lines, END]) + "\n"


def _block_section(label: str, sec: dict) -> list[str]:
    v, composed = sec.get("versions") or {}, ", ".join(sec.get("composed_with") or [])
    also = f" Every PR's tree also holds PR {composed} (`--with`)." if composed else ""
    lines = [
        f"### {label}, {sec['mode']} mode",
        "",
        f"{sec['date']}, {sec['machine']}; torch {v.get('torch')}, triton {v.get('triton')}, "
        f"coverage {v.get('coverage')}; op `{(sec.get('op_commit') or 'not recorded')[:12]}`; "
        f"wall {sec['wall_s']} s.{also}",
        "",
        "| PR | file | pytest run by test-op.sh | rc | passed | failed | skipped | s |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for inv in sec["invocations"]:
        runs, pr = inv["pytest_runs"], _run_suffix(inv["pr"], inv)
        if not runs:
            what = "nothing: this test-op.sh runs no pytest for this file"
            what = inv.get("note") if inv["rc"] is None else what
            lines.append(
                f"| {pr} | `{inv['file']}` | {what} | {_rc(inv['rc'])} | 0 | 0 | 0 "
                f"| {inv['seconds']} |"
            )
        for i, run in enumerate(runs):
            last = i == len(runs) - 1
            fails = "; ".join(
                f"`{f['nodeid'].split('::', 1)[-1]}` ({f['reason_class']})"
                for f in run["failures"][:2]
            )
            what = f"`{_cell(run['command'])}`" + (f": {fails}" if fails else "")
            if run.get("summary") is None:
                what += " (no pytest summary)"
            secs = run.get("pytest_seconds") and f"{run['pytest_seconds']} in pytest"
            secs = secs or ""
            if last:
                secs += f"{'; ' if secs else ''}{inv['seconds']} in all"
            lines.append(
                f"| {pr if i == 0 else ''} | {('`' + inv['file'] + '`') if i == 0 else ''} "
                f"| {what} | {inv['rc'] if last else ''} | {run['passed']} | {run['failed']} "
                f"| {run['skipped']} | {secs} |"
            )
        if runs and inv.get("timed_out"):
            lines.append(f"| | | {inv['note']} | | | | | |")
    tc = sec.get("test_copy") or {}
    rows = [(_run_suffix("without PR", r), r) for r in tc.get("without_pr", [])] + [
        (f"with {_run_suffix(r['pr'], r)}", r) for r in tc.get("with_pr", [])
    ]
    if rows:
        lines += [
            "",
            "| upstream `tests/test_copy.py` | command | rc | passed | failed | skipped | failures by reason | s |",
            "|---|---|---:|---:|---:|---:|---|---:|",
        ]
    for who, r in rows:
        classes = ", ".join(f"{k} {n}" for k, n in r["failure_classes"].items())
        reasons = sorted({f["reason"] for f in r.get("failures", []) if f["reason"]})
        if reasons:
            classes += " (" + "; ".join(f"`{_cell(x[:80])}`" for x in reasons[:2]) + ")"
        lines.append(
            f"| {who} | `{r['command']}` | {_rc(r['rc'])} | {r['passed']} | {r['failed']} | "
            f"{r['skipped']} | {classes or 'none'} | {r['seconds']} |"
        )
    runs = [x for inv in sec["invocations"] for x in inv["pytest_runs"]]
    blocked = {
        r["command"]
        for r in runs + [r for _, r in rows]
        if any(
            "copy_'s" in e or " copy_ " in e for e in r.get("registration_errors") or []
        )
    }
    if blocked:
        lines += [
            "",
            f"**FlagGems could not register `copy_`** in {len(blocked)} of these pytest runs "
            "(`Skipped registering operator`, in the log): their `copy_` calls reached the "
            "device model, not FlagGems, with or without the PR.",
        ]
    return lines + [""]


def write_docs(doc: Path | None = None, results_dir: Path | None = None) -> Path:
    """Replace (or append) the marked block in docs/UPSTREAM_CHECK.md; the rest is kept."""
    doc = doc or common.DOCS
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


if __name__ == "__main__":
    sys.exit(main())
