"""A FlagGems-checkout-shaped base for CI, built from the PyPI flag-gems wheel (harness).

    python -m copyfix.synthetic_base <dir>

CI cannot reach upstream's git repository, and no FlagGems newer than 5.0.2 is on
PyPI, so CI cannot compose over FlagGems main.  What it can check is the other way a
base arrives, `FLAGGEMS_BASE=<checkout>`: a repository root with `src/flag_gems`, a
setuptools-scm `pyproject.toml` and no installed distribution metadata.  This lays the
5.0.2 wheel's package out that way; the emulation must recognise it by its files (as
5.0.2), and the PR tests must pass over it.  The real main of 2026-08-21 is run outside
CI (here and on the device) and recorded in docs/COPY_REPORT.md.
"""

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEEL_SPEC = "flag-gems==5.0.2"
PYPROJECT = """\
[project]
name = "flag_gems"
dynamic = ["version"]

[tool.setuptools_scm]
write_to = "src/flag_gems/_version.py"
"""


def build(root: Path) -> Path:
    """Write the checkout under ``root`` (replaced if present); return ``root``."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps"]
            + ["--only-binary=:all:", "-d", tmp, WHEEL_SPEC],
            check=True,
        )
        (wheel,) = Path(tmp).glob("flag_gems-*.whl")
        if root.exists():
            subprocess.run(["rm", "-rf", str(root)], check=True)
        src = root / "src"
        with zipfile.ZipFile(wheel) as archive:
            members = [m for m in archive.namelist() if m.startswith("flag_gems/")]
            archive.extractall(src, members)
    (root / "pyproject.toml").write_text(PYPROJECT)
    return root


if __name__ == "__main__":
    print(build(Path(sys.argv[1]).resolve()))
