"""pytest plugin (harness) for upstream FlagGems' own tests on the emulation, configured
by environment variables (xdist workers see what the controller sees):
``COPYFIX_EMULATION`` (activated at import, before upstream's conftest imports
flag_gems), ``COPYFIX_UPSTREAM_FAULT=1`` (the device model on all session),
``COPYFIX_UPSTREAM_SELECT`` (a JSON list of the node ids to keep), else
``COPYFIX_UPSTREAM_PER_TEST`` (the first N cases of each test function),
``COPYFIX_UPSTREAM_MEM_GB`` (cpu mode's address-space cap), ``COPYFIX_UPSTREAM_OUT``
(one JSON record per test, with its calls to the kunlunxin copy/copy_: see ``_spy``).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections import Counter
from pathlib import Path

import pytest

from copyfix import emulation, records

pytest_plugins = ["copyfix.upstream.xdist"]  # (upstream v5.0.2's conftest under xdist)
CALLS: dict[str, int] = {}  # nodeid -> kunlunxin copy/copy_ calls (in this process)
_current: list[str] = []  # the nodeid running now (at most one)
_records: dict[str, dict] = {}
_fault = None

# The interpreter's blocks are numpy arrays, several times the tensors' size: a case that
# would grow past the cap fails alone with a MemoryError ("memory-cap").  Not in cuda
# mode: the CUDA driver reserves far more address space than it uses.
if emulation.activate() == "cpu":
    import resource

    _limit = int(float(os.environ.get("COPYFIX_UPSTREAM_MEM_GB") or 0) * 2**30)
    if _limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (_limit, _limit))


def _counting(fn):
    @functools.wraps(fn)  # keeps __name__: flag_gems' include/exclude lists match on it
    def spy(*args, **kwargs):
        if _current:
            CALLS[_current[0]] = CALLS.get(_current[0], 0) + 1
        return fn(*args, **kwargs)

    return spy


def _spy() -> int:
    """Rebind the kunlunxin copy/copy_ to counting wrappers wherever flag_gems holds
    them, before use_gems() reads them; how many references were rebound."""
    module = emulation.copy_module()
    targets = {
        id(getattr(module, n)): getattr(module, n)
        for n in ("copy", "copy_")
        if callable(getattr(module, n, None))
    }
    spies = {key: _counting(fn) for key, fn in targets.items()}
    rebound = 0
    for name, mod in list(sys.modules.items()):
        if mod is None or not name.startswith(("flag_gems", "_kunlunxin")):
            continue
        for attr, value in list(vars(mod).items()):
            if id(value) in spies and value is targets[id(value)]:
                setattr(mod, attr, spies[id(value)])
                rebound += 1
    import flag_gems

    def swap(item):
        if isinstance(item, tuple) and len(item) >= 2 and id(item[1]) in spies:
            return (item[0], spies[id(item[1])], *item[2:])
        return item

    if hasattr(flag_gems, "_FULL_CONFIG"):
        new = tuple(map(swap, flag_gems._FULL_CONFIG))
        rebound += sum(a is not b for a, b in zip(new, flag_gems._FULL_CONFIG))
        flag_gems._FULL_CONFIG = new
    for items in getattr(flag_gems, "FULL_CONFIG_BY_FUNC", {}).values():
        for i, item in enumerate(items):
            if (new := swap(item)) is not item:
                items[i] = new
                rebound += 1
    return rebound


def pytest_configure(config):
    global _fault
    # (not on an xdist controller: its workers run the tests)
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", 0):
        if _spy() == 0:
            raise pytest.UsageError(
                "copyfix.upstream.plugin: found no reference to the kunlunxin copy/copy_ to spy on"
            )
        if os.environ.get("COPYFIX_UPSTREAM_FAULT") == "1":
            _fault = emulation.xpu_device_model()
            _fault.__enter__()


def pytest_unconfigure(config):
    global _fault
    if _fault is not None:
        _fault.__exit__(None, None, None)
        _fault = None


def pytest_collection_modifyitems(config, items):
    path = os.environ.get("COPYFIX_UPSTREAM_SELECT")
    per_test = int(os.environ.get("COPYFIX_UPSTREAM_PER_TEST") or 0)
    if path:
        wanted = set(json.loads(Path(path).read_text()))
        keep = [i for i in items if i.nodeid in wanted]
    elif per_test:  # a scan: the first N cases of each test function
        seen, keep = Counter(), []
        for i in items:
            seen[f := i.nodeid.split("[", 1)[0]] += 1
            if seen[f] <= per_test:
                keep.append(i)
    else:
        return
    kept = set(map(id, keep))
    if drop := [i for i in items if id(i) not in kept]:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _current[:] = [item.nodeid]
    CALLS.setdefault(item.nodeid, 0)
    try:
        yield
    finally:
        _current.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    # the count travels with the report, so under xdist the controller receives it
    outcome.get_result().user_properties.append(
        ("copyfix_copy_calls", CALLS.get(item.nodeid, 0))
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_logreport(report):
    yield
    _record(report)


def _reason(report) -> str:
    if (crash := getattr(report.longrepr, "reprcrash", None)) is not None:
        return crash.message
    if isinstance(report.longrepr, tuple):
        return str(report.longrepr[-1])
    return str(report.longrepr or "")


def _record(report) -> None:
    rec = _records.setdefault(
        report.nodeid, {"outcome": "passed", "reason": None, "copy_calls": 0}
    )
    for key, value in report.user_properties:
        if key == "copyfix_copy_calls":
            rec["copy_calls"] = max(rec["copy_calls"], int(value))
    if report.outcome == "passed" or rec["outcome"] != "passed":
        return  # keep the first non-pass (setup error beats the call, call beats teardown)
    failed = "failed" if report.when == "call" else "error"
    rec["outcome"] = "skipped" if report.skipped else failed
    rec["reason"] = _reason(report)[:2000]
    if report.failed:
        rec["longrepr_tail"] = str(report.longrepr)[-1500:]


def pytest_sessionfinish(session, exitstatus):
    out = os.environ.get("COPYFIX_UPSTREAM_OUT")
    if out and not hasattr(session.config, "workerinput"):
        import flag_gems

        try:  # written by copyfix.compose: which base files the overlay replaced
            from flag_gems import _overlay_info as info
        except ImportError:
            info = None
        meta = {
            "versions": emulation.versions(),
            "flag_gems": str(Path(flag_gems.__file__).parent),
            "copy_module": emulation.copy_module().__file__,
            "replaced": list(getattr(info, "REPLACED", [])),
            "fault": os.environ.get("COPYFIX_UPSTREAM_FAULT") == "1",
            "exitstatus": int(exitstatus),
        }
        records.write(out, {"meta": meta, "records": _records}, sort_keys=True)
