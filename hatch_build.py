"""Hatchling build hook (harness file): compose flag_gems = pinned base + overlay.

The work is in harness/copyfix/compose.py (importable by tests without hatchling).
Editable installs get build/composed on sys.path with the overlay files
symlinked in; wheels get a copy of the composed tree.
"""

import sys
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

sys.path.insert(0, str(Path(__file__).parent / "harness"))
from copyfix.compose import compose  # noqa: E402


class CustomBuildHook(BuildHookInterface):
    def initialize(self, version, build_data):
        editable = version == "editable"
        out = compose(Path(self.root), editable)
        if not editable:
            force = build_data["force_include"]
            force[str(out / "flag_gems")] = "flag_gems"
            force[str(Path(self.root) / "harness" / "copyfix")] = "copyfix"
