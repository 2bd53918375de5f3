"""The generic copy_/_to_copy's own tests (the generic conversions PR), on FlagGems'
default backend: the cpu emulation's NVIDIA variant (COPYFIX_CPU_VENDOR=nvidia, its
generic pointwise_dynamic codegen on Triton's interpreter), in a fresh process. On
the emulated KunlunXIN backend they skip themselves, as on any backend with its own
copy_ and _to_copy, and the suite leaves them out (copyfix.pytest_plugin)."""

import os
import subprocess
import sys

import pytest

from copyfix import export, pytest_plugin

pytestmark = pytest.mark.harness


def test_generic_conversion_tests_pass_on_the_default_backend():
    env = dict(os.environ, COPYFIX_EMULATION="cpu", COPYFIX_CPU_VENDOR="nvidia")
    env.pop("PYTEST_XDIST_WORKER", None)
    files = [f"tests/{name}" for name in pytest_plugin.GENERIC_OP_TESTS]
    run = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files]
    done = subprocess.run(run, cwd=export.REPO, env=env, capture_output=True, text=True)
    tail = done.stdout.strip().splitlines()[-1]
    assert done.returncode == 0, done.stdout[-3000:]
    assert " passed" in tail and "skipped" not in tail and "failed" not in tail, tail
