"""Upstream FlagGems' own tests and CI, run against this overlay (harness only).

:mod:`.check`   ``make upstream-check``: upstream's tests that reach copy_, base vs overlay
:mod:`.ci`      ``make upstream-ci``: upstream's per-PR script (tools/test-op.sh) per PR file
:mod:`.plugin`  the pytest plugin those runs load into upstream's tests (emulation, selection)
:mod:`.later`   ``make upstream-later``: upstream's later tle_copy-era copy.py in place of ours
:mod:`.xdist`   a pytest plugin for v5.0.2's conftest under xdist, nothing else
"""
