"""What ``check`` and ``ci`` share (harness): paths, the checkout checks, the
environment of a pytest run under ``copyfix.upstream.plugin``, the run itself, what
the plugin wrote, and the reason class of a failure."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
RESULTS = REPO / "results"
DOCS = REPO / "docs" / "UPSTREAM_CHECK.md"
PLUGIN = "copyfix.upstream.plugin"
# cpu mode: address-space cap of each pytest process (controller and each xdist worker)
MEM_GB_PER_PROCESS = float(os.environ.get("COPYFIX_UPSTREAM_MEM_GB") or 6)

# Failure text -> reason class, first match wins.  What the emulated device cannot do is
# an emulation limit, whatever copy_ does; the injected KunlunXIN fault is its own class.
REASON_PATTERNS = (
    ("xpu-fault", r"invalid device function"),
    # the per-process address-space cap of cpu mode (MEM_GB_PER_PROCESS)
    (
        "memory-cap",
        r"MemoryError|can't allocate memory|Cannot allocate memory|std::bad_alloc",
    ),
    (
        "emulation-limit",
        r"exceeds triton maximum tensor numel"  # interpreter / stock Triton 2**20 block cap
        r"|exists only in KunlunXIN's Triton"  # XPU-only libdevice stubs
        r"|Torch not compiled with CUDA|Found no NVIDIA driver|No CUDA GPUs"
        r"|CUDA driver|torch\.cuda\.|is_cuda|device_type.?==.?.cuda"
        r"|Expected all tensors to be on the same device"
        r"|cuda(:\d+)?[\"'\]]? device|device=.?cuda|on (a )?CUDA device"
        r"|interpreter|TRITON_INTERPRET|InterpretedFunction"
        r"|not implemented for 'CPU'|CPU backend|for CPU tensors|Could not run .* 'CPU' backend"
        r"|Unsupported function referenced|generate_configs"
        # a CPU-only op reached through the CPU dispatch key, which cpu mode registers on
        r"|CPU only\. There seems a mistake to dispatch",
    ),
    ("assertion", r"AssertionError|assert |Mismatched elements|not close"),
)


def reason_class(text: str | None, patterns=REASON_PATTERNS) -> str:
    for name, pattern in patterns:
        if text and re.search(pattern, text):
            return name
    return "other"


def first_line(text: str | None, n: int = 300) -> str:
    return text.splitlines()[0][:n] if text else ""


def checkout_label(checkout: Path) -> str:
    """v<__version__> of the checkout's flag_gems if it states one, else the folder name."""
    init = checkout / "src" / "flag_gems" / "__init__.py"
    m = re.search(r'^__version__\s*=\s*["\']([^"\']+)["\']', init.read_text(), re.M)
    return f"v{m.group(1)}" if m else checkout.resolve().name


def check_checkout(checkout: Path) -> Path:
    checkout = checkout.expanduser().resolve()
    for rel in ("src/flag_gems/__init__.py", "tests/conftest.py"):
        if not (checkout / rel).is_file():
            raise SystemExit(f"{checkout} is not a FlagGems checkout (no {rel})")
    return checkout


def pytest_env(src: Path, mode: str, *, fault=True, out=None, **more) -> dict:
    """The environment of a run with ``src``'s flag_gems first on PYTHONPATH, the
    harness next, and the plugin's settings (``more``: other variables to set)."""
    cleared = ("TRITON_INTERPRET", "CHANGED_FILES")  # (the plugin's activation decides)
    cleared += tuple(f"COPYFIX_UPSTREAM_{n}" for n in ("SELECT", "PER_TEST", "OUT"))
    env = {k: v for k, v in os.environ.items() if k not in cleared}
    inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env.update(
        PYTHONPATH=os.pathsep.join([str(src), str(REPO / "harness"), *inherited]),
        COPYFIX_EMULATION=mode,
        COPYFIX_UPSTREAM_FAULT="1" if fault else "0",
        COPYFIX_UPSTREAM_MEM_GB=str(MEM_GB_PER_PROCESS),  # (the plugin: cpu mode only)
        **more,
    )
    if out is not None:
        env["COPYFIX_UPSTREAM_OUT"] = str(out)
    return env


def call(cmd: list[str], cwd: Path, env: dict, log: Path, timeout=None) -> tuple:
    """Run ``cmd``, output to ``log``; (rc, seconds, timed_out).  With a timeout it gets
    its own process group, which is killed on expiry (rc 124)."""
    started = time.monotonic()
    with open(log, "w") as fh:
        out = dict(stdout=fh, stderr=subprocess.STDOUT)
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, start_new_session=bool(timeout), **out
        )
        try:
            rc, timed_out = proc.wait(timeout=timeout or None), False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc, timed_out = 124, True
    return rc, round(time.monotonic() - started, 1), timed_out


def read_out(out: Path, tree: Path | None = None) -> dict | None:
    """What the plugin wrote (``meta``, ``records``); paths under ``tree`` as <copy>/."""
    if not out.is_file():
        return None
    data = json.loads(out.read_text())
    for key in ("flag_gems", "copy_module"):
        p = Path(data["meta"].get(key) or "")
        if tree is not None and p.is_absolute() and p.is_relative_to(tree):
            data["meta"][key] = f"<copy>/{p.relative_to(tree)}"
    return data


def op_identity() -> dict:
    """The copy.py measured (see copyfix.bench.op_identity)."""
    from copyfix.bench import op_identity

    return op_identity()
