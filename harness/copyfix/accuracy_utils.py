"""Stand-in for upstream FlagGems' ``tests/accuracy_utils.py`` (harness only).

The PR test files import ``from . import accuracy_utils as utils`` as every upstream
test does.  Upstream's module lives in its ``tests/`` folder, which the PyPI wheel does
not ship, and its text must not be copied here.  This module implements, in our own
words, just the part of its interface the PR tests use, with the semantics upstream
documents for it:

* ``TO_CPU`` / ``QUICK_MODE``: ``--ref=cpu`` / ``--quick`` (the options upstream's
  ``tests/conftest.py`` adds; :mod:`copyfix.pytest_plugin` adds them here and sets these);
* ``to_reference(inp, upcast=False)``: the reference input, moved to the CPU under
  ``--ref=cpu``;
* ``gems_assert_equal(res, ref, equal_nan=False)``: exact equality via
  ``flag_gems.testing.assert_equal``, ``res`` moved to the CPU first under ``--ref=cpu``.

:mod:`copyfix.pytest_plugin` registers it as ``tests.accuracy_utils`` when the test
package has no module of that name.  Inside an upstream checkout the real one is used.
"""

import torch

TO_CPU = False
QUICK_MODE = False


def to_reference(inp, upcast=False):
    if inp is None:
        return None
    ref = inp.to("cpu") if TO_CPU else inp
    if upcast:
        ref = ref.to(torch.complex128 if ref.is_complex() else torch.float64)
    return ref


def to_cpu(res, ref):
    if TO_CPU and isinstance(res, torch.Tensor) and isinstance(ref, torch.Tensor):
        res = res.to("cpu")
    return res


def gems_assert_equal(res, ref, equal_nan=False):
    import flag_gems

    flag_gems.testing.assert_equal(to_cpu(res, ref), ref, equal_nan=equal_nan)
