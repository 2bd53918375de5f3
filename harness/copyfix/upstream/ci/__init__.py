"""Upstream's per-PR CI for the exported PRs, on the emulated KunlunXIN runner.

Harness file (not part of the upstream PR).  ``make upstream-ci UPSTREAM=<checkout>``:

    python -m copyfix.upstream.ci <checkout> --mode cpu|cuda [--label L] [--pr NAME ...]
        [--results PATH] [--machine TEXT] [--no-docs] [--test-copy quick|full|none]
        [--file PATH ...] [--timeout S] [--log-dir DIR]
    python -m copyfix.upstream.ci --docs-only   # rewrite the block in docs/UPSTREAM_CHECK.md

What a PR labelled ``vendor/Kunlunxin`` gets upstream: ``tools/test-op.sh`` on the
``kunlunxin`` runner with ``CHANGED_FILES`` = the PR's files.  Here, for each PR (default:
every PR in ``copyfix.export.PRS``), on its own temporary copy of the checkout (src, tests,
benchmark, tools and the top-level pytest/packaging files; the checkout itself is never
written to) with that PR applied by ``export.apply_pr``:

* the checkout's own ``tools/test-op.sh`` runs once per PR file (``CHANGED_FILES=<file>``),
  cwd = the copy, with ``PYTHONPATH=<copy>/src:<repo>/harness[:inherited]`` (the copy's
  flag_gems is the one imported), ``PYTEST_ADDOPTS="-p copyfix.upstream.plugin"``,
  ``COPYFIX_EMULATION=<mode>`` and ``COPYFIX_UPSTREAM_FAULT=1`` (the device model,
  ``emulation.xpu_device_model``, on for every pytest session), and ``PATH`` starting with
  this interpreter's bin folder, then ``$UPSTREAM_CI_PATH_PREPEND``.  The script runs under
  ``bash -x`` only so that every pytest command it runs is traced into the log: that is how
  each pytest run's counts are matched to its command.  ``COLUMNS`` is widened so pytest's
  short summary keeps whole failure reasons.  Nothing else differs from upstream's CI.
* upstream's ``tests/test_copy.py`` runs as test-op.sh would run it (``pytest -s FILE`` and
  ``pytest -s FILE --ref=cpu --quick``, without ``-x`` so the counts are complete) on that
  copy and on a pristine copy (without any PR); each failure gets a reason class
  (``upstream_check.REASON_PATTERNS``: ``xpu-fault`` is the missing strided kernel,
  ``invalid device function``).

Results: ``results/upstream_ci_<mode>.json`` (one section per base label, other bases kept)
and a block between ``<!-- upstream-ci -->`` markers in ``docs/UPSTREAM_CHECK.md``.
Bad input (no checkout, not a FlagGems checkout, no ``tools/test-op.sh``, an unknown
pre-image, a base the emulation does not know, no ``coverage``) stops with one line and
exit code 2 before anything is copied or run.
"""

from __future__ import annotations

import argparse
import sys

# (the package's names: its modules' public functions, as one namespace)
from copyfix.upstream.ci.environment import (  # noqa: F401
    DEFAULT_TIMEOUT,
    REPO,
    TEST_COPY,
    TEST_OP,
    InputError,
    copy_checkout,
    run_env,
    validate,
)
from copyfix.upstream.ci.markdown import render_block, write_docs  # noqa: F401
from copyfix.upstream.ci.merging import write_results
from copyfix.upstream.ci.parsing import (  # noqa: F401
    parse_summary,
    reason_class,
    split_runs,
    sum_runs,
)
from copyfix.upstream.ci.runs import (  # noqa: F401
    NOT_RUN,
    run_base,
    run_test_copy,
    test_copy_commands,
)

# ------------------------------------------------------------------------- main


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="copyfix.upstream.ci", description=__doc__.split("\n")[0]
    )
    p.add_argument("checkout", nargs="?", help="FlagGems checkout (src, tests, tools)")
    p.add_argument("--mode", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--label", help="base label (default v<__version__> or folder name)")
    p.add_argument(
        "--pr", nargs="+", help="PR names (default: every PR in copyfix.export.PRS)"
    )
    p.add_argument("--file", nargs="+", help="only these PR files (default: all)")
    p.add_argument(
        "--with",
        dest="with_prs",
        nargs="+",
        help="apply these PRs too, under every PR run (e.g. launch-cache: PRs 1 and 2 "
        "with PR 3 composed)",
    )
    p.add_argument(
        "--results", help="results file (default results/upstream_ci_<mode>.json)"
    )
    p.add_argument("--machine", help="machine description for the report")
    p.add_argument(
        "--no-docs", action="store_true", help="do not touch docs/UPSTREAM_CHECK.md"
    )
    p.add_argument(
        "--test-copy",
        choices=("quick", "full", "none"),
        default="full",
        help=f"{TEST_COPY} with and without the PR: both of test-op.sh's commands (full), "
        "the --ref=cpu --quick one (quick), or none",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help="seconds per test-op.sh invocation or pytest run (0: none); on expiry the "
        "process group is killed and the record says so",
    )
    p.add_argument(
        "--budget",
        type=float,
        help="seconds for all runs of this base; each run gets what is left (and at "
        "most --timeout), runs after that are recorded as not run",
    )
    p.add_argument("--log-dir", help="copy every full log here")
    p.add_argument(
        "--docs-only", action="store_true", help="only rewrite the docs block"
    )
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.docs_only:
        print(f"wrote {write_docs()}")
        return 0
    try:
        if not args.checkout:
            raise InputError(
                "no checkout given (python -m copyfix.upstream.ci <checkout>)"
            )
        v = validate(args)
    except InputError as e:
        print(f"upstream-ci: {e}", file=sys.stderr)
        raise
    section = run_base(v, args)
    write_results(v["results"], v["label"], section)
    if not args.no_docs:
        write_docs()
    for inv in section["invocations"]:
        print(
            f"upstream-ci {v['label']} {inv['pr']} {inv['file']}: rc {inv['rc']}, "
            f"{inv['passed']} passed, {inv['failed']} failed, {inv['skipped']} skipped, "
            f"{len(inv['pytest_runs'])} pytest runs, {inv['seconds']} s"
        )
    for key in ("without_pr", "with_pr"):
        for r in section["test_copy"][key]:
            print(
                f"upstream-ci {v['label']} test_copy {key} ({r['command']}): rc {r['rc']}, "
                f"{r['passed']} passed, {r['failed']} failed, {r['skipped']} skipped; "
                f"{r['failure_classes'] or 'no failures'}"
            )
    print(f"wrote {v['results']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
