"""Upstream FlagGems' own tests and CI, run against this overlay (harness only).

:mod:`.check`   ``make upstream-check``: upstream's tests that reach copy_, base vs overlay
:mod:`.ci`      ``make upstream-ci``: upstream's per-PR script (tools/test-op.sh) per PR file
:mod:`.plugin`  the pytest plugin those runs load into upstream's tests (emulation, selection)
:mod:`.later`   upstream's later tle_copy-era files laid into a copy of main (``--head-tree``)
:mod:`.xdist`   a pytest plugin for v5.0.2's conftest under xdist, nothing else
"""
