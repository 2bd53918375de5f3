"""pytest plugin (harness only, `-p copyfix.pytest_plugin`): run the suite on the
emulated KunlunXIN backend.  Activates the emulation before flag_gems is imported, runs
the PR tests and benchmark under the device model (``--xpu-model=off`` to skip), gives
the PR files upstream's ``--ref``/``--quick`` and ``tests.accuracy_utils``, and counts a
skipped test as a failure (every collected test must execute here).
"""

import os
import sys
from pathlib import Path

import pytest

from copyfix import accuracy_utils, emulation


def pytest_addoption(parser):
    parser.addoption(
        "--emulation",
        choices=emulation.MODES,
        default=None,
        help="KunlunXIN emulation mode (default: $COPYFIX_EMULATION, else auto: native > cuda > cpu)",
    )
    parser.addoption(
        "--xpu-model",
        choices=("on", "off"),
        default=os.environ.get("COPYFIX_XPU_MODEL", "on"),
        help="the KunlunXIN device model around the PR tests and benchmark (default on)",
    )
    for name, kwargs in (
        ("--ref", dict(default="device", help="where references run (upstream's)")),
        ("--quick", dict(action="store_true", help="upstream's quick mode")),
    ):
        try:
            parser.addoption(name, **kwargs)
        except ValueError:  # an upstream conftest in the same run added it
            pass


def pytest_configure(config):
    emulation.activate(config.getoption("--emulation"))
    accuracy_utils.TO_CPU = config.getoption("--ref") == "cpu"
    accuracy_utils.QUICK_MODE = bool(config.getoption("--quick"))
    if not (Path(config.rootpath) / "tests" / "accuracy_utils.py").exists():
        sys.modules.setdefault("tests.accuracy_utils", accuracy_utils)
    # the benchmark file's `from . import base, consts, utils`, where upstream's are absent
    if not (Path(config.rootpath) / "benchmark" / "base.py").exists():
        from copyfix import bench_stand_ins

        for name in ("base", "consts", "utils"):
            sys.modules.setdefault(f"benchmark.{name}", getattr(bench_stand_ins, name))


# Generic-op tests that skip on KunlunXIN: tests/overlay/test_generic_ops.py runs them
# on FlagGems' default backend in a fresh process instead.
GENERIC_OP_TESTS = ("test_copy_dtype_conversions.py",)


def pytest_ignore_collect(collection_path, config):
    if collection_path.name in GENERIC_OP_TESTS and emulation.CPU_VENDOR != "nvidia":
        return True
    return None


def pytest_report_header(config):
    v = emulation.versions()
    return (
        f"copyfix emulation: mode={v['mode']} torch={v['torch']} triton={v['triton']} "
        f"flag_gems={v['flag_gems']} xpu-model={config.getoption('--xpu-model')}"
    )


# Folders whose tests install the device model themselves where they need it.
UNMODELLED = ("overlay", "tooling")


def _under_model(item) -> bool:
    if item.config.getoption("--xpu-model") != "on" or emulation.MODE == "native":
        return False
    rel = Path(item.path).resolve().relative_to(Path(item.config.rootpath).resolve())
    return rel.parts[0] in ("tests", "benchmark") and rel.parts[1] not in UNMODELLED


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    if not _under_model(item):
        yield
        return
    # a benchmark computes no reference: the whole model even on the CPU key
    benchmark = Path(item.path).resolve().parent.name == "benchmark"
    with emulation.xpu_device_model(
        "cpu" if benchmark and emulation.MODE == "cpu" else None
    ):
        yield


@pytest.hookimpl(tryfirst=True)  # (before the session and the terminal count it)
def pytest_runtest_logreport(report):
    if report.skipped:
        reason = report.longrepr
        reason = reason[-1] if isinstance(reason, tuple) else reason
        report.outcome = "failed"
        report.longrepr = (
            f"skipped test counted as a failure in this repository: {reason}"
        )
