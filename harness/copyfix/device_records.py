"""The upstream test runs of a device script, as one JSON record (harness only).

    python -m copyfix.device_records --logs DIR --out FILE --machine M --sha-key KEY [--extra JSON]

DIR holds ``up-<checkout>-<run>.xml`` (pytest's junit files) and
``up-<checkout>-preimage.sha256`` (sha256sum of the checkout's op file, kept under KEY).
An existing FILE is continued: a checkout run again replaces that checkout's runs.
"""

import argparse
import json
import sys
from pathlib import Path

from copyfix import records


def collect(logs: Path, out: Path, sha_key: str) -> dict:
    """{checkout: {sha_key: ..., run: counts}}, continuing the runs already in ``out``."""
    try:  # an earlier call's runs, replaced checkout by checkout
        runs = json.loads(out.read_text())["checkouts"]
    except (OSError, ValueError, KeyError):
        runs = {}
    rerun = set()
    for path in sorted(logs.glob("up-*.xml")):
        label, run = path.name[3:-4].split("-", 1)
        sha = (logs / f"up-{label}-preimage.sha256").read_text().split()[0]
        if label not in rerun:
            runs[label] = {sha_key: sha}
            rerun.add(label)
        runs[label][run] = records.junit_counts(path)
    return runs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="copyfix.device_records")
    parser.add_argument("--logs", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--machine", required=True)
    parser.add_argument("--sha-key", required=True)
    parser.add_argument("--extra", default="{}", help="JSON object: more record fields")
    args = parser.parse_args(argv)
    runs = collect(args.logs, args.out, args.sha_key)
    record = {"machine": args.machine, **json.loads(args.extra), "checkouts": runs}
    records.write(args.out, record)
    for label, r in runs.items():
        counts = {k: (v["passed"], v["failures"] + v["errors"], v["skipped"])
                  for k, v in r.items() if isinstance(v, dict)}  # fmt: skip
        print(label, counts, "(passed, failed, skipped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
