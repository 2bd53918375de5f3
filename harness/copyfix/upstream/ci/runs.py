"""The runs (test-op.sh once per PR file, upstream's tests/test_copy.py with and without
the PR), what their logs say, and the base's section of the results (harness)."""

from __future__ import annotations

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

from copyfix import records
from copyfix.budget import Budget
from copyfix.upstream import common
from copyfix.upstream.ci.environment import (
    PATH_PREPEND_ENV,
    PLUGIN,
    REPO,
    TEST_COPY,
    TEST_OP,
    _git,
    copy_checkout,
    github_sha,
    make_shims,
    run_env,
)
from copyfix.upstream.common import call, first_line, op_identity, read_out

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


def reason_class(text: str | None) -> str:
    return common.reason_class(text, CI_REASON_PATTERNS)


def parse_failures(text: str) -> list[dict]:
    out = []
    for m in filter(None, map(_FAILURE.match, map(str.rstrip, text.splitlines()))):
        reason = (m.group(3) or "").strip()
        outcome = "failed" if m.group(1) == "FAILED" else "error"
        out.append({"nodeid": m.group(2), "outcome": outcome, "reason": reason[:300]})
        out[-1]["reason_class"] = reason_class(reason)
    return out


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


def _run(cmd, tree, env, budget, log, keep, say: str) -> tuple | None:
    """``cmd`` for what the budget leaves: (rc, seconds, timed_out, log text, note),
    the log copied to ``keep``; None when the budget is spent."""
    timeout = budget.limit()
    if timeout == 0:
        return None
    print(f"[upstream-ci] {say}", flush=True)
    rc, seconds, timed_out = call(cmd, tree, env, log, timeout)
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


def run_test_op(tree, pr, rel, *, mode, sha, shims, budget, work, log_dir, n) -> dict:
    out = work / f"invocation-{n}.json"
    env = dict(run_env(tree, mode, out, shims), CHANGED_FILES=rel, GITHUB_SHA=sha)
    cmd = ["bash", "-x", TEST_OP, pr]
    command = f"CHANGED_FILES={rel} GITHUB_SHA={sha} {shlex.join(cmd)}"
    rec = {"pr": pr, "file": rel, "command": command}
    keep = log_dir and Path(log_dir) / f"test-op-{pr}-{n}.log"
    say = f"{pr}: CHANGED_FILES={rel} bash -x {TEST_OP} {pr}"
    done = _run(cmd, tree, env, budget, work / f"invocation-{n}.log", keep, say)
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
    data = read_out(out, tree)
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


def run_test_copy(tree, cmd, *, pr, mode, shims, budget, work, log_dir, n) -> dict:
    out = work / f"test-copy-{n}.json"
    keep = log_dir and Path(log_dir) / f"test-copy-{pr or 'without'}-{n}.log"
    env = run_env(tree, mode, out, shims)
    say = f"test_copy ({pr or 'without PR'}): {shlex.join(cmd)}"
    done = _run(cmd, tree, env, budget, work / f"test-copy-{n}.log", keep, say)
    if done is None:
        rec = {"pr": pr, "command": shlex.join(cmd), "rc": None, **ZERO}
        return {**rec, "failures": [], "failure_classes": {}, "note": NOT_RUN}
    rc, seconds, timed_out, text, killed = done
    rec = {"pr": pr, **_run_record(shlex.join(cmd), text), "rc": rc}
    rec.update(seconds=seconds, timed_out=timed_out)
    if killed:
        rec["note"] = killed
    data = read_out(out, tree)
    if data:  # the plugin's records: whole failure reasons, the copy calls
        recs = data["records"]
        rec["failures"] = [
            dict(nodeid=k, outcome=r["outcome"], reason=first_line(r.get("reason")))
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


def _pr_files(names) -> dict:
    """sha256 of each PR file as run, and whether it differs from the committed one."""
    from copyfix import export

    out = {}
    for rel in (rel for name in names for rel in export.PRS[name].kept_files()):
        done = _git("status", "--porcelain", "--", rel)
        ok = done is not None and done.returncode == 0
        out[rel] = {
            "sha256": records.sha256(export.REPO / rel),
            "uncommitted": bool(done.stdout.strip()) if ok else None,
        }
    return out


def run_base(v: dict, args) -> dict:
    """Every invocation for one checkout; the base's section of the results."""
    from copyfix import export

    checkout, prs, with_prs = v["checkout"], v["prs"], args.with_prs or []
    sha, started = github_sha(), time.monotonic()
    if args.log_dir:
        Path(args.log_dir).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="copyfix-upstream-ci-"))
    invocations, with_pr, without_pr = [], [], []
    n = 0

    def test_copy(tree, pr, into):
        nonlocal n
        for cmd in test_copy_commands(args.test_copy):
            n += 1
            into.append(run_test_copy(tree, cmd, pr=pr, n=n, **common))

    try:
        made = make_shims(work / "shims", v["tools"])
        shims = work / "shims" if made else None
        probe_env = run_env(work, args.mode, None, shims)
        done = subprocess.run(
            ["coverage", "--version"], env=probe_env, timeout=120, **_CAPTURE
        )
        m = re.search(r"(\d+\.\d+(?:\.\d+)?)", (done.stdout + done.stderr).strip())
        versions = {"python": platform.python_version(), "coverage": m and m.group(1)}
        budget = Budget(args.budget, timeout=args.timeout)
        common = dict(mode=args.mode, shims=shims, budget=budget, work=work)
        common["log_dir"] = args.log_dir
        for name, files in prs.items():
            tree = copy_checkout(checkout, work / f"pr-{name}")
            applied = export.apply_stack(tree, name, with_prs)
            print(
                f"[upstream-ci] {v['label']}: PR {name} applied: {', '.join(applied)}"
            )
            for rel in files:
                n += 1
                invocations.append(run_test_op(tree, name, rel, sha=sha, n=n, **common))
            test_copy(tree, name, with_pr)
        if args.test_copy != "none":
            test_copy(copy_checkout(checkout, work / "pristine"), None, without_pr)
        for rec in with_pr + without_pr + invocations:
            found = rec.get("meta", {}).get("versions") or rec.get("versions")
            if found:
                versions.update(found)
                break
        else:
            versions.update(_probe_versions(work, args.mode, shims))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "base": v["label"],
        "checkout": str(checkout),
        **records.stamp(mode=args.mode, machine=args.machine),
        **op_identity(),
        "versions": versions,
        "prs": dict(prs),
        "composed_with": list(with_prs),
        "pr_files": _pr_files(prs),
        "test_op_sha256": records.sha256(checkout / TEST_OP),
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
        "test_copy": dict(which=args.test_copy, without_pr=without_pr, with_pr=with_pr),
        "wall_s": round(time.monotonic() - started, 1),
    }


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
