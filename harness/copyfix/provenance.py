"""Which op a results record measured: the last commit of the op's files.

Harness file.  On the device the tree travels without ``.git``: there the commit comes
from an environment variable the caller sets (``COPYFIX_OP_COMMIT`` by default).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def op_commit(*paths: str, env: str | None = "COPYFIX_OP_COMMIT") -> str | None:
    """``$env`` if set, else the last commit of ``paths`` in this repository (None
    without git or history)."""
    if env and os.environ.get(env):
        return os.environ[env]
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO), "log", "-1", "--format=%H", "--", *paths],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip() or None


def measured(*paths: str, env: str | None = "COPYFIX_OP_COMMIT") -> dict:
    """What a record names of the op it measured: ``op_commit`` and ``measured_paths``
    (the paths that commit is held against by tests/tooling/test_results_current.py)."""
    return {"op_commit": op_commit(*paths, env=env), "measured_paths": list(paths)}
