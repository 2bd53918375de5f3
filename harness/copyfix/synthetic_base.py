"""``python -m copyfix.synthetic_base <dir>``: the PyPI flag-gems 5.0.2 wheel laid out
as a FlagGems checkout (src/flag_gems, a setuptools-scm pyproject.toml, no installed
metadata), for CI to compose over with `FLAGGEMS_BASE=<dir>`.
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
