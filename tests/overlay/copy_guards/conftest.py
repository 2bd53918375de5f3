"""The copy_ guard tests' shared module, guard_helpers, asserts with pytest's messages."""

import pytest

pytest.register_assert_rewrite("guard_helpers")
