"""Upstream's per-PR CI for the exported PRs, on the emulated KunlunXIN runner.

Harness file (not part of the upstream PR); ``make upstream-ci UPSTREAM=<checkout>``, or
``python -m copyfix.upstream.ci --docs-only`` to rewrite the block in UPSTREAM_CHECK.md.

What a ``vendor/Kunlunxin`` PR gets upstream: ``tools/test-op.sh`` with ``CHANGED_FILES`` =
the PR's files.  Here each PR (default: every one in ``copyfix.export.PRS``) is applied
(``export.apply_stack``) to its own copy of the checkout, and the checkout's own
test-op.sh runs once per PR file under ``bash -x`` (so each traced pytest command is
matched to its counts), the copy's flag_gems first on PYTHONPATH, ``-p
copyfix.upstream.plugin`` and the device model on (``COPYFIX_UPSTREAM_FAULT=1``).
Upstream's ``tests/test_copy.py`` runs as test-op.sh would run it, without ``-x``, with
and without the PR.  Results: ``results/upstream_ci_<mode>.json`` (one section per
base) and a block of ``docs/UPSTREAM_CHECK.md``.  Bad input stops with one line and
exit code 2 before anything is copied or run.
"""

from __future__ import annotations

import argparse
import sys

from copyfix.upstream.ci.environment import (  # noqa: F401  (the package's names)
    DEFAULT_TIMEOUT,
    TEST_COPY,
    TEST_OP,
    InputError,
    copy_checkout,
    validate,
)
from copyfix.upstream.ci.results import render_block, write_docs, write_results  # noqa: F401
from copyfix.upstream.ci.runs import (  # noqa: F401
    NOT_RUN,
    reason_class,
    run_base,
    run_test_copy,
    split_runs,
    sum_runs,
    test_copy_commands,
)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="copyfix.upstream.ci", description=__doc__.split("\n")[0]
    )
    arg = p.add_argument
    arg("checkout", nargs="?", help="FlagGems checkout (src, tests, tools)")
    arg("--mode", choices=("cpu", "cuda"), default="cpu")
    arg("--label", help="base label (default v<__version__> or folder name)")
    arg("--pr", nargs="+", help="PR names (default: every PR)")
    arg("--file", nargs="+", help="only these PR files (default: all)")
    arg(
        "--with",
        dest="with_prs",
        nargs="+",
        help="apply these PRs too, under every PR run",
    )
    arg("--results", help="default results/upstream_ci_<mode>.json")
    arg("--machine", help="machine description for the report")
    arg("--no-docs", action="store_true", help="leave the docs as they are")
    arg("--test-copy", choices=("quick", "full", "none"), default="full",
        help=f"{TEST_COPY} with and without the PR: test-op.sh's two commands, "
        "the --ref=cpu --quick one, or none")  # fmt: skip
    arg("--timeout", type=float, default=DEFAULT_TIMEOUT,
        help="seconds per test-op.sh invocation or pytest run (0: none)")  # fmt: skip
    arg(
        "--budget",
        type=float,
        help="seconds for all runs of this base (runs after that: not run)",
    )
    arg("--log-dir", help="copy every full log here")
    arg("--docs-only", action="store_true", help="only rewrite the docs")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.docs_only:
        print(f"wrote {write_docs()}")
        return 0
    try:
        if not args.checkout:
            raise InputError("no checkout given (copyfix.upstream.ci <checkout>)")
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
