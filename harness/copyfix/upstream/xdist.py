"""pytest plugin (harness only): upstream v5.0.2's tests/conftest.py under xdist.

That conftest fills ``TEST_RESULTS[nodeid]`` in ``pytest_runtest_protocol`` (on the
workers) and indexes it in ``pytest_runtest_logreport`` (on the controller too):
KeyError.  A hookwrapper runs before every plain implementation, so an empty entry put
there first lets upstream's hook work unchanged (main's conftest does ``setdefault``
itself).  Nothing else; it is loaded through ``copyfix.upstream.plugin``.
"""

import pytest


def give_results_an_entry(config, nodeid) -> None:
    for plugin in config.pluginmanager.get_plugins():
        table = getattr(plugin, "TEST_RESULTS", None)
        if isinstance(table, dict):
            table.setdefault(nodeid, {"params": None, "result": None, "opname": None})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_logreport(report):
    if _session_config:
        give_results_an_entry(_session_config[0], report.nodeid)
    yield


_session_config: list = []


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    _session_config[:] = [session.config]
