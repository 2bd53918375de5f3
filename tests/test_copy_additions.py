"""The tests the stack's PRs append to upstream's ``tests/test_copy.py`` (the added
lines of their patches, which are our code), run as this module's own: upstream's
file itself is not in this repository. Upstream runs them in its own file.
``COPYFIX_STACK_UPTO=<n>``: only those of PRs 1 to n (tests/overlay/test_stack.py)."""

import os

import pytest  # noqa: F401
import torch  # noqa: F401

import flag_gems  # noqa: F401
from copyfix import export

from . import accuracy_utils as utils  # noqa: F401

UPTO = int(os.environ.get("COPYFIX_STACK_UPTO", "0"))
exec(
    compile(export.added_code("tests/test_copy.py", UPTO), "tests/test_copy.py", "exec")
)
