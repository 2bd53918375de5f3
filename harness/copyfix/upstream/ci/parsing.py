"""What upstream's CI runs print: pytest's runs in a traced test-op.sh log, their counts,
failures and the reason class of each (harness)."""

from __future__ import annotations

import re

from copyfix.records import parse_summary
from copyfix.upstream import common

TAIL = 1500

_FAILURE = re.compile(r"^(FAILED|ERROR) (\S+)(?: - (.*))?$")
# Tried before common.REASON_PATTERNS: upstream's benchmark/base.py times with the
# device's timers, which Triton's interpreter lacks.
CI_REASON_PATTERNS = (
    ("emulation-limit", r"'InterpreterDriver' object has no attribute"),
    *common.REASON_PATTERNS,
)


def reason_class(text: str | None) -> str:
    return common.reason_class(text, CI_REASON_PATTERNS)


def parse_failures(text: str) -> list[dict]:
    """``FAILED``/``ERROR`` lines of pytest's short test summary: nodeid, first line of reason."""
    out = []
    for line in text.splitlines():
        m = _FAILURE.match(line.rstrip())
        if m:
            reason = (m.group(3) or "").strip()
            outcome = "failed" if m.group(1) == "FAILED" else "error"
            out.append(
                {"nodeid": m.group(2), "outcome": outcome, "reason": reason[:300]}
            )
            out[-1]["reason_class"] = reason_class(reason)
    return out


# a pytest command in bash's xtrace of test-op.sh (top level: one '+')
_TRACED = re.compile(
    r"^\+ ((?:coverage run .*-m pytest|pytest|python\S* -m pytest)\b.*)$"
)


def split_runs(log: str) -> list[dict]:
    """The pytest runs of one traced test-op.sh log: the text from each traced pytest
    command to the next (other trace lines left out), its counts and failures."""
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
    counts = ("passed", "failed", "skipped", "errors")
    rec = {"command": command, **{k: (summary or {}).get(k, 0) for k in counts}}
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
    """FlagGems' swallowed registration errors, each once (one naming ``copy_``: its
    copy_ never ran in that session)."""
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
