"""Results records (``results/*.json``): the one way to load one, merge a section into
it, write it and stamp the run that made it.

Harness file.  Every measurement and upstream runner writes through :func:`update`
(load, change, write to a temporary file, then ``os.replace``: a reader never sees half
a record, and a run that dies mid-write leaves the old one).  :func:`stamp` gives the
run info a record names beside its figures, :func:`parse_summary` reads pytest's
summary line and :func:`junit_counts` its junit file.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from copyfix.compose import sha256 as sha256
from copyfix.provenance import measured

# ------------------------------------------------------------------ files


def load(path: Path) -> dict:
    """The record at ``path``; empty when there is none yet."""
    path = Path(path)
    return json.loads(path.read_text()) if path.is_file() else {}


def dumps(data: dict, sort_keys: bool = False) -> str:
    """``data`` as indented JSON, but each entry of any ``pairs`` mapping on one line
    (a conversion matrix stays one (src, dst) pair a line)."""
    entries = []

    def mark(x):
        if isinstance(x, list):
            return [mark(v) for v in x]
        if not isinstance(x, dict):
            return x
        out = {}
        for k, v in x.items():
            if k == "pairs" and isinstance(v, dict):
                out[k] = {}
                for pair, entry in v.items():
                    out[k][pair] = f"@pair{len(entries)}@"
                    entries.append(entry)
            else:
                out[k] = mark(v)
        return out

    text = json.dumps(mark(data), indent=1, sort_keys=sort_keys)
    for i, entry in enumerate(entries):
        text = text.replace(f'"@pair{i}@"', json.dumps(entry), 1)
    return text + "\n"


def write(path: Path, data: dict, sort_keys: bool = False) -> dict:
    """Write ``data`` to ``path`` atomically (temporary file + ``os.replace``): every
    JSON file the harness writes, results and the runs' own outputs alike."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(dumps(data, sort_keys))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return data


def update(path: Path, change) -> dict:
    """Load the record at ``path``, ``change(data)`` (the new data), write it back."""
    return write(path, change(load(path)))


# ------------------------------------------------------------------ run info


def date() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def machine() -> str:
    """This host: name, CPUs, architecture (a run may name its machine instead)."""
    return f"{platform.node() or 'host'}: {os.cpu_count()} CPUs, {platform.machine()}"


def stamp(*op_files: str, env: str | None = "COPYFIX_OP_COMMIT", **given) -> dict:
    """What a record names beside its figures: ``date``, ``machine`` (this host unless
    given), ``op_commit`` (the last commit of ``op_files``, or ``$env`` where the tree
    travelled without git) with ``measured_paths`` (``op_files``: what
    tests/tooling/test_results_current.py holds ``op_commit`` against; both left out
    without ``op_files``) and whichever of ``mode``, ``versions`` and ``command`` are
    given."""
    info = {"date": date(), "machine": given.pop("machine", None) or machine()}
    if op_files:
        info.update(measured(*op_files, env=env))
    info.update((k, v) for k, v in given.items() if v is not None)
    return info


# ------------------------------------------------------------------ pytest's counts

# pytest's last line: ``== 3 passed, 1 failed in 2.0s ==``, or without the rules (-q)
_SUMMARY = re.compile(
    r"^(?:=+ )?(?P<body>(?:\d+ \w+|no tests ran)\b.*?\bin [\d.]+s\b.*?)(?: =+)?\s*$"
)
_COUNT = re.compile(
    r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected|warnings?|rerun)"
)


def parse_summary(text: str) -> dict | None:
    """Counts from pytest's last summary line in ``text``.

    None when there is none (pytest stopped before a session summary, e.g. a usage error).
    ``errors`` sums ``error``/``errors``; ``no tests ran`` is all zeros; ``line`` is the
    summary without its rules, ``seconds`` pytest's own time.
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


def junit_counts(path: Path) -> dict:
    """tests, failures, errors, skipped, passed, seconds and the failed cases' names
    of a pytest junit file (summed over its test suites)."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    n = {
        k: sum(int(s.get(k, 0)) for s in suites)
        for k in ("tests", "failures", "errors", "skipped")
    }
    failed = [
        c.get("name")
        for s in suites
        for c in s.iter("testcase")
        if c.find("failure") is not None or c.find("error") is not None
    ]
    n["passed"] = n["tests"] - n["failures"] - n["errors"] - n["skipped"]
    n["seconds"] = round(sum(float(s.get("time", 0)) for s in suites), 1)
    n["failed_cases"] = failed[:40]
    return n
