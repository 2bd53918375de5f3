"""``make test-triton TRITON=<version>``: the cpu emulation on another Triton.

``build/triton-<version>/`` is a venv holding only that Triton and seeing the rest of
``.venv`` through a ``.pth``. There, ``import flag_gems`` must work for the base alone
and for the composition, then the PR tests run (PR 7's only where the cache is
active). The record goes to ``build/triton_matrix/<version>.json`` and, with
``--record PATH``, is merged into PATH, one record per version.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from copyfix import records

REPO = Path(__file__).resolve().parents[2]
PR_TESTS = ("tests/test_copy_ops.py", "tests/test_to_copy_conversions.py")
CACHE_TESTS = ("tests/test_launch_cache.py", "tests/overlay/test_launch_cache.py")
OFF_TESTS = ("tests/overlay/test_launch_cache_off.py",)


def venv(version: str) -> Path:
    root = REPO / "build" / f"triton-{version}"
    python = root / "bin" / "python"
    main_site = next((REPO / ".venv" / "lib").glob("python3.*/site-packages"))
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    site = next((root / "lib").glob("python3.*/site-packages"))
    (site / "zz_copyfix_main_venv.pth").write_text(
        f"import site; site.addsitedir({str(main_site)!r})\n"
    )
    found = subprocess.run(
        [str(python), "-c", "import triton; print(triton.__version__)"],
        capture_output=True,
        text=True,
        env=_clean_env(),
    ).stdout.strip()
    if found != version:
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--no-deps",
             "--disable-pip-version-check", f"triton=={version}"],
            check=True,
        )  # fmt: skip
    return python


def _clean_env(**extra) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("COPYFIX_", "TRITON_", "GEMS_", "FLAGGEMS_", "PYTHONPATH"))
    }
    env.update(extra)
    return env


_IMPORT = """
import json, triton
from copyfix import emulation
try:
    emulation.activate("cpu")
    import flag_gems
    out = {"imported": True, "file": flag_gems.__file__}
except Exception as e:
    out = {"imported": False, "error": f"{type(e).__name__}: {e}"}
out["triton"] = triton.__version__
try:
    from flag_gems.utils import launch_cache
    launch_cache.set_enabled(True)  # (opt-in: whether it can be on on this Triton)
    out["launch_cache"] = launch_cache.is_enabled()
except ImportError:
    out["launch_cache"] = None
print(json.dumps(out))
"""


def import_check(python: Path) -> dict:
    from copyfix.compose import COMPOSED, decompose

    results = {}
    with tempfile.TemporaryDirectory(prefix="copyfix-base-") as tmp:
        decompose(REPO / COMPOSED / "flag_gems", Path(tmp) / "flag_gems")
        for label, path in (("base", tmp), ("composed", None)):
            env = _clean_env(**({"PYTHONPATH": path} if path else {}))
            run = subprocess.run(
                [str(python), "-c", _IMPORT], capture_output=True, text=True, env=env
            )
            lines = run.stdout.strip().splitlines()
            results[label] = (
                json.loads(lines[-1])
                if lines
                else {"imported": False, "error": run.stderr[-2000:]}
            )
        base_file = results["base"].get("file", "")
        if results["base"].get("imported") and not base_file.startswith(tmp):
            results["base"] = {"imported": False, "error": f"imported {base_file}"}
    return results


# the files whose last commit a record names as its op
OP_FILES = (
    "src/flag_gems/utils/launch_cache.py",
    "src/flag_gems/utils/pointwise_dynamic.py.patch",
    "src/flag_gems/runtime/backend/_kunlunxin/ops",
    "src/flag_gems/ops",
)
NO_TESTS = {"passed": 0, "failed": 0, "skipped": 0}


def _counts(junit: Path) -> dict:
    if not junit.is_file():
        return dict(NO_TESTS)
    n = records.junit_counts(junit)
    failed = n["failures"] + n["errors"]
    return {"passed": n["passed"], "failed": failed, "skipped": n["skipped"]}


def record(version, imports, counts, reason) -> dict:
    composed = imports.get("composed", {})
    return {
        "triton": version,
        "base_import": bool(imports.get("base", {}).get("imported")),
        "overlay_import": bool(composed.get("imported")),
        "cache_active": bool(composed.get("launch_cache")),
        **counts,
        "reason": reason,
        **records.measured(*OP_FILES),
        "date": records.date(),
    }


def _write(rec: dict, path: Path | None) -> None:
    records.write(REPO / "build" / "triton_matrix" / f"{rec['triton']}.json", rec)
    if path is not None:

        def change(data):
            runs = {r["triton"]: r for r in data.get("runs", [])}
            runs[rec["triton"]] = rec
            order = sorted(runs, key=lambda v: tuple(int(x) for x in v.split(".")))
            return {
                "what": "the Triton matrix (make test-triton): the cpu emulation on each "
                "Triton FlagGems' backends pin; the main run (make test) is 3.6.0",
                "runs": [runs[v] for v in order],
            }

        records.update(path, change)


def main(argv=None) -> int:
    args = list(argv or sys.argv[1:])
    out = None
    if "--record" in args:
        at = args.index("--record")
        out = Path(args[at + 1]).resolve()
        del args[at : at + 2]
    version = args[0]
    python = venv(version)
    imports = import_check(python)
    print(f"triton {version}: import flag_gems " + json.dumps(imports), flush=True)
    if not all(r.get("imported") for r in imports.values()):
        print(f"triton {version}: flag_gems does not import", file=sys.stderr)
        errors = {
            k: r.get("error") for k, r in imports.items() if not r.get("imported")
        }
        _write(record(version, imports, dict(NO_TESTS), errors), out)
        return 1
    cache_active = bool(imports["composed"].get("launch_cache"))
    files = PR_TESTS + (CACHE_TESTS if cache_active else ()) + OFF_TESTS
    with tempfile.TemporaryDirectory(prefix="copyfix-matrix-") as tmp:
        junit = Path(tmp) / "junit.xml"
        cmd = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        cmd += ["-n", os.environ.get("TRITON_MATRIX_JOBS", "2"), *files]
        cmd += [f"--junitxml={junit}"]
        print(f"triton {version}: " + " ".join(cmd[1:]), flush=True)
        rc = subprocess.run(cmd, cwd=REPO, env=_clean_env()).returncode
        counts = _counts(junit)
    off = "the cache is off on this Triton: its PR 7 tests are not run"
    _write(record(version, imports, counts, None if cache_active else off), out)
    return rc


if __name__ == "__main__":
    sys.exit(main())
