"""The tests the stack's PRs append to upstream's ``tests/test_copy.py`` (the added
lines of their patches, which are our code), run as this module's own: upstream's
file itself is not in this repository. Upstream runs them in its own file."""

import pytest  # noqa: F401
import torch  # noqa: F401

import flag_gems  # noqa: F401
from copyfix import export

from . import accuracy_utils as utils  # noqa: F401

exec(compile(export.added_code("tests/test_copy.py"), "tests/test_copy.py", "exec"))
