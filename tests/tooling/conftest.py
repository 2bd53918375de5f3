"""Shared by the upstream tool tests: a synthetic FlagGems checkout."""

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def base_checkout(tmp_path_factory):
    """src/flag_gems of the 5.0.2 base the build kept, an empty tests/ package and a
    pytest.ini; each module's ``checkout`` adds its own files."""
    import flag_gems
    from copyfix import compose

    root = tmp_path_factory.mktemp("up") / "FlagGems"
    compose.decompose(Path(flag_gems.__file__).parent, root / "src" / "flag_gems")
    (root / "tests").mkdir()
    (root / "tests" / "__init__.py").write_text("")
    (root / "pytest.ini").write_text("[pytest]\ntestpaths = tests\npythonpath = src\n")
    return root
