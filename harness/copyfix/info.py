"""`flaggems-overlay-info`: where the composed flag_gems came from and what the overlay replaced."""

import importlib.util
import sys
from pathlib import Path

from copyfix.compose import overlay_info


def describe() -> str:
    spec = importlib.util.find_spec("flag_gems")
    if spec is None:
        return "flag_gems is not installed"
    # read by path: importing flag_gems itself needs a device (or the emulation harness)
    info = overlay_info(Path(next(iter(spec.submodule_search_locations))))
    if not info:
        return f"flag_gems at {spec.origin}: plain install, no copyfix overlay"
    lines = [
        f"flag_gems at {spec.origin}",
        f"base: {info['BASE_ORIGIN']}",
        f"overlay active ({'editable, live symlinks' if info['EDITABLE'] else 'copied'}):",
    ]
    for f in info["OVERLAY_FILES"]:
        replaces = f.split("flag_gems/", 1)[1] in info["REPLACED"]
        lines.append(f"  {f}{'  (replaces base file)' if replaces else ''}")
    lines += [f"  {p}  (patches base file)" for p in info.get("PATCHES", [])]
    return "\n".join(lines)


def main() -> int:
    print(describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
