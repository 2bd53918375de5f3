"""Upstream FlagGems' own tests, base vs base + overlay, KunlunXIN fault on (harness;
``make upstream-check`` / ``upstream-discover``; ``docs`` regenerates docs/UPSTREAM_CHECK.md).
What runs and how cases are classified: DOC_INTRO."""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from copyfix import records
from copyfix.upstream.common import (
    DOCS,
    PLUGIN,
    REPO,
    RESULTS,
    call,
    check_checkout,
    checkout_label,
    first_line,
    op_identity,
    pytest_env,
    read_out,
    reason_class,
)

CLASSES = ("fixed", "regressed", "pass_both", "fail_both", "skipped")
MISSING = {"outcome": "missing", "reason": "not run", "copy_calls": 0}


@contextlib.contextmanager
def workspace(checkout: Path):
    """(work, {"base", "overlay": composed flag_gems}, run dir with the tests' copy)"""
    from unittest import mock

    from copyfix.compose import compose

    with tempfile.TemporaryDirectory(prefix="copyfix-upstream-") as tmp:
        work, composed, run = Path(tmp), {}, Path(tmp) / "run"
        with mock.patch.dict("os.environ", FLAGGEMS_BASE=str(checkout)):
            for name in ("base", "overlay"):
                src = work / f"project-{name}" / "src"
                src.mkdir(parents=True)
                shutil.copy(REPO / "pyproject.toml", src.parent / "pyproject.toml")
                if name == "overlay":
                    (src / "flag_gems").symlink_to(REPO / "src" / "flag_gems")
                else:
                    (src / "flag_gems").mkdir()
                composed[name] = compose(src.parent, editable=False)
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(checkout / "tests", run / "tests", ignore=ignore)
        if (checkout / "pytest.ini").is_file():
            shutil.copy(checkout / "pytest.ini", run / "pytest.ini")
        yield work, composed, run


def run_pytest(composed, run_dir, targets, name, work, *, jobs, quick, **env) -> dict:
    """One pytest process over ``targets``; ``env`` as pytest_env takes it."""
    out, log = work / f"{name}.json", work / f"{name}.log"
    env = pytest_env(composed, out=out, PYTHONDONTWRITEBYTECODE="1", **env)
    cmd = [sys.executable, "-m", "pytest", "-p", PLUGIN, "-p", "no:cacheprovider"]
    cmd += ["-o", "pythonpath=", "-q", "-rN", "--tb=short", "-W", "ignore"]
    cmd += ["--continue-on-collection-errors"]  # e.g. a file that needs CUDA at import
    cmd += ["--quick"] * quick + (["-n", str(jobs)] if jobs > 0 else []) + targets
    rc, wall, _ = call(cmd, run_dir, env, log)
    data = read_out(out)
    if data is None:
        from copyfix import emulation
        from copyfix.compose import overlay_info

        text = log.read_text()
        errors = re.findall(r"^(?:E\s+)?([\w.]+(?:Error|Exception): .*)$", text, re.M)
        origin = overlay_info(composed / "flag_gems").get("BASE_ORIGIN", str(composed))
        known = getattr(emulation, "SUPPORTED_VERSIONS", {}).get("flag_gems", ("?",))
        raise SystemExit(
            f"{text[-3000:]}\n\nupstream-check: the pytest run with the "
            f"{composed.parents[1].name.removeprefix('project-')} composition ({origin}) "
            f"stopped before running any test (rc {rc}).\n"
            f"Last error: {errors[-1] if errors else '(none found; see the output above)'}\n"
            f"If that is an import of flag_gems failing, copyfix.emulation "
            f"({env['COPYFIX_EMULATION']} mode) does not support this base (yet): it is "
            f"written for flag_gems {', '.join(known)}."
        )
    data["meta"].update(wall_s=wall, returncode=rc)
    return data


def _normalise(text: str | None) -> str:
    text = re.sub(r"0x[0-9a-f]+", "0x", first_line(text, None))
    text = re.sub(r"/tmp/\S+", "<tmp>", text)
    return re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", text)


def classify(base: dict | None, overlay: dict | None) -> dict:
    base, overlay = base or MISSING, overlay or MISSING
    ok_b, ok_o = base["outcome"] == "passed", overlay["outcome"] == "passed"
    if "skipped" in (base["outcome"], overlay["outcome"]):
        return {"class": "skipped", "reason_class": "skipped"}
    if ok_b and ok_o:
        return {"class": "pass_both", "reason_class": None}
    if ok_b or ok_o:  # the reason the failing side failed
        why = reason_class((overlay if ok_b else base)["reason"])
        return {"class": "regressed" if ok_b else "fixed", "reason_class": why}
    rb, ro = reason_class(base["reason"]), reason_class(overlay["reason"])
    if "memory-cap" in (rb, ro):
        why = "memory-cap"
    elif "emulation-limit" in (rb, ro):
        why = "emulation-limit"
    elif ro == "xpu-fault":
        why = "xpu-fault"  # the overlay still reaches the fault
    elif _normalise(base["reason"]) == _normalise(overlay["reason"]):
        why = "same-failure"
    else:
        why = "different-failure"
    return {"class": "fail_both", "reason_class": why}


def summarise(cases: list[dict]) -> dict:
    counts = Counter(c["class"] for c in cases)
    summary = {**{k: counts.get(k, 0) for k in CLASSES}, "cases": len(cases)}
    summary["reached_copy"] = sum(
        bool(c["base"]["copy_calls"] or c["overlay"]["copy_calls"]) for c in cases
    )
    fail_both = Counter(c["reason_class"] for c in cases if c["class"] == "fail_both")
    summary["fail_both_reasons"] = dict(sorted(fail_both.items()))
    return summary


def limit_round_robin(nodeids: list[str], limit: int | None) -> list[str]:
    """At most ``limit`` node ids, taken one file at a time in turn."""
    if not limit or limit >= len(nodeids):
        return sorted(nodeids)
    by_file: dict[str, list[str]] = {}
    for n in sorted(nodeids):
        by_file.setdefault(n.split("::", 1)[0], []).append(n)
    picked, queues = [], [v for _, v in sorted(by_file.items())]
    while len(picked) < limit:
        for q in queues:
            if q and len(picked) < limit:
                picked.append(q.pop(0))
    return sorted(picked)


def _files_of(nodeids) -> list[str]:
    return sorted({n.split("::", 1)[0] for n in nodeids})


def _checkout_label(args) -> tuple[Path, str]:
    checkout = check_checkout(args.upstream)
    return checkout, args.label or checkout_label(checkout)


def cmd_discover(args) -> int:
    checkout, label = _checkout_label(args)
    targets = sorted(
        args.files
        or (
            str(p.relative_to(checkout))
            for p in (checkout / "tests").rglob("test_*.py")
            if "__pycache__" not in p.parts
        )
    )
    functions, scan = targets, None
    with workspace(checkout) as (work, composed, run_dir):
        composed = composed["base"]
        common = dict(mode=args.mode, fault=False, jobs=args.jobs, quick=args.quick)
        if args.scan:  # the first --scan cases of each test function; those reaching
            # copy/copy_ pick the functions run in full below
            per_test = {"COPYFIX_UPSTREAM_PER_TEST": str(args.scan)}
            scan = run_pytest(
                composed, run_dir, targets, "scan", work, **common, **per_test
            )
            called = [n for n, r in scan["records"].items() if r["copy_calls"]]
            functions = sorted({n.split("[", 1)[0] for n in called})
            print(
                f"scan: {len(scan['records'])} cases (first {args.scan} per test function) in "
                f"{scan['meta']['wall_s']} s; {len(functions)} test functions called copy/copy_",
                flush=True,
            )
        data = run_pytest(composed, run_dir, functions, "discover", work, **common)
        if args.log:
            shutil.copy(work / "discover.log", args.log)
    cases = data["records"]
    reached = {n: r for n, r in cases.items() if r["copy_calls"] > 0}
    out = Path(args.out or RESULTS / f"upstream_selection_{label}.json")
    searched = (
        f"; searched: every test function whose first {args.scan} case(s) called it"
        if args.scan
        else "; searched: every case of the searched files"
    )
    selection = {
        "op_independent": "which of the checkout's own test cases reach the kunlunxin "
        "copy/copy_ in the base composition (the checkout's files, none of this repository's)",
        "label": label,
        "checkout": str(checkout),
        "how": "cases of the base composition (XPU fault off) that called the kunlunxin "
        "copy/copy_ at least once" + searched,
        "mode": args.mode,
        "quick": args.quick,
        "generated": records.date(),
        "versions": data["meta"].get("versions"),
        "searched_files": targets,
        "scan": scan
        and {
            "per_test": args.scan,
            "cases": len(scan["records"]),
            "wall_s": scan["meta"]["wall_s"],
            "functions_reached": len(functions),
        },
        "cases_run": len(cases),
        "wall_s": data["meta"]["wall_s"],
        "cases": {
            n: {"outcome": r["outcome"], "copy_calls": r["copy_calls"]}
            for n, r in sorted(reached.items())
        },
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    records.write(out, selection)
    print(
        f"discover {label}: {len(cases)} cases run, {len(reached)} called the kunlunxin "
        f"copy/copy_ ({len(_files_of(reached))} files); wrote {out}"
    )
    return 0


def _brief(rec: dict | None) -> dict:
    if rec is None:
        return dict(MISSING)
    out = {"outcome": rec["outcome"], "copy_calls": rec["copy_calls"]}
    if rec.get("reason"):
        out["reason"] = first_line(rec["reason"])
    return out


def cmd_check(args) -> int:
    checkout, label = _checkout_label(args)
    sel_file = Path(args.selection or RESULTS / f"upstream_selection_{label}.json")
    if not sel_file.is_file():
        raise SystemExit(
            f"no selection {sel_file}: run `python -m copyfix.upstream.check discover {checkout}"
            f"{' --label ' + label if args.label else ''}` first (or pass --selection)"
        )
    selection = json.loads(sel_file.read_text())
    nodeids = selection["cases"]
    if args.files:
        wanted = [f.rstrip("/") for f in args.files]
        nodeids = [
            n for n in nodeids if any(n == w or n.startswith(w + "::") for w in wanted)
        ]
    if args.keyword:
        nodeids = [n for n in nodeids if re.search(args.keyword, n)]
    nodeids = limit_round_robin(list(nodeids), args.limit)
    if not nodeids:
        raise SystemExit("the selection (after --files/-k/--limit) is empty")
    quick = selection["quick"] if args.quick is None else args.quick
    started = time.monotonic()
    runs = {}
    with workspace(checkout) as (work, composed, run_dir):
        select = work / "select.json"
        records.write(select, nodeids)
        files = _files_of(nodeids)
        for name in ("base", "overlay"):
            runs[name] = run = run_pytest(
                composed[name], run_dir, files, name, work, mode=args.mode,
                jobs=args.jobs, quick=quick, COPYFIX_UPSTREAM_SELECT=str(select),
            )  # fmt: skip
            if args.log_dir:
                Path(args.log_dir).mkdir(parents=True, exist_ok=True)
                shutil.copy(work / f"{name}.log", Path(args.log_dir) / f"{name}.log")
            n, wall = len(run["records"]), run["meta"]["wall_s"]
            print(f"{name}: {n} cases in {wall} s", flush=True)
    # the base run must have imported the checkout's own copy.py, the overlay run ours
    copy_rel = "runtime/backend/_kunlunxin/ops/copy.py"
    b, o = (runs[k]["meta"].get("replaced", []) for k in ("base", "overlay"))
    if copy_rel in b or copy_rel not in o:
        raise SystemExit(
            f"compositions mixed up: base replaced {b}, overlay replaced {o}"
        )
    cases = []
    for n in nodeids:
        b = _brief(runs["base"]["records"].get(n))
        o = _brief(runs["overlay"]["records"].get(n))
        # classified from what is stored, so `reclassify` gives the same answer later
        rec = {"nodeid": n, **classify(b, o), "base": b, "overlay": o}
        rec["base_fault_off"] = selection["cases"][n]["outcome"]
        cases.append(rec)
    section = {
        "summary": summarise(cases),
        "meta": {
            "label": label,
            "checkout": str(checkout),
            "mode": args.mode,
            "jobs": args.jobs,
            "quick": quick,
            "selection": str(sel_file.relative_to(REPO))
            if sel_file.is_relative_to(REPO)
            else str(sel_file),
            "selected": len(nodeids),
            "selection_size": len(selection["cases"]),
            "limit": args.limit,
            "files": files,
            "versions": runs["overlay"]["meta"].get("versions"),
            "wall_s": round(time.monotonic() - started, 1),
            "run_wall_s": {k: v["meta"]["wall_s"] for k, v in runs.items()},
            **records.stamp(machine=args.machine),
            **op_identity(),
        },
        "cases": cases,
    }
    out = Path(args.results or RESULTS / f"upstream_check_{args.mode}.json")
    write_results(out, label, section)
    if not args.no_docs:
        write_docs()
    s = section["summary"]
    print(
        f"upstream-check {label} ({args.mode}): fixed {s['fixed']}, regressed {s['regressed']}, "
        f"pass_both {s['pass_both']}, fail_both {s['fail_both']} {s['fail_both_reasons']}, "
        f"skipped {s['skipped']}; {section['meta']['wall_s']} s; wrote {out}"
    )
    return 1 if s["regressed"] and args.strict else 0


def cmd_docs(args) -> int:
    print(f"wrote {write_docs()}")
    return 0


def cmd_reclassify(args) -> int:
    for path in sorted(RESULTS.glob("upstream_check_*.json")):
        data = json.loads(path.read_text())
        for label, sec in data["bases"].items():
            for case in sec["cases"]:
                case.update(classify(case["base"], case["overlay"]))
            sec["summary"] = summarise(sec["cases"])
            write_results(path, label, sec)
        print(f"reclassified {path}")
    return cmd_docs(args)


def write_results(path: Path, label: str, section: dict) -> dict:
    """Merge one base's section into the mode's results file (other bases are kept)."""

    def merge(data):
        bases = {**data.get("bases", {}), label: section}
        keys = (*CLASSES, "cases")
        summary = {k: sum(s["summary"][k] for s in bases.values()) for k in keys}
        summary["bases"] = sorted(bases)
        return {"summary": summary, "bases": dict(sorted(bases.items()))}

    return records.update(path, merge)


DOC_INTRO = """\
# Upstream FlagGems tests, before and after this change (KunlunXIN fault on)

Generated by `python -m copyfix.upstream.check` (`make upstream-check UPSTREAM=<checkout>`)
from `results/upstream_check_<mode>.json`; do not edit by hand.

**What runs.** The checkout's own `tests/`, copied to a temporary folder (the checkout is not
touched), twice: against the checkout composed alone (**base**) and with this overlay's
`copy.py` laid over it (**overlay**). Both runs have the KunlunXIN fault injected
(`copyfix.emulation.xpu_fallback_failure()`: aten's strided copy fallback raises
`CUDA error: invalid device function`, as on the XPU) and run on the emulated kunlunxin
backend (`GEMS_VENDOR=kunlunxin`; cpu = Triton interpreter, cuda = stock Triton on NVIDIA).

**Which cases.** Those that call the kunlunxin `copy`/`copy_` (`emulation.copy_module()`):
`discover` runs candidate test files against the base with the fault off, counts calls with
a spy (the function objects rebound to counting wrappers wherever flag_gems holds them:
`_FULL_CONFIG`, `FULL_CONFIG_BY_FUNC`, module globals) and keeps every case with at least one
call: `results/upstream_selection_<base>.json`. Every record also carries the calls counted in
the check runs themselves.

**Classes.** `pass_both`, `fixed` (base fails, overlay passes), `regressed` (base passes,
overlay fails), `fail_both`, `skipped` (skipped in either run; never counted as a pass).
Each failure gets a reason class from its failure text (first match wins, patterns in
`REASON_PATTERNS`): `xpu-fault` (the injected `invalid device function`), `emulation-limit`
(what the emulated device cannot do whatever copy_ does: tensors required on CUDA, stock
Triton's / the interpreter's 2^20-element block cap, XPU-only libdevice stubs), `memory-cap`
(cpu mode caps each pytest process's address space, 6 GiB by default,
`COPYFIX_UPSTREAM_MEM_GB`: the interpreter holds every block as numpy arrays, and uncapped
cases grew past 14 GB), `assertion`, `other`. A `fail_both` case is `memory-cap` or
`emulation-limit` if either run's failure is one,
`xpu-fault` if the overlay still hits the fault, `same-failure` if both messages agree once
numbers and addresses are masked, else `different-failure`.

**xdist.** Upstream v5.0.2's `tests/conftest.py` indexes `TEST_RESULTS[nodeid]` in
`pytest_runtest_logreport`, which on the xdist controller was never filled (KeyError).
`copyfix.upstream.plugin` gives the controller's table an empty entry in a hookwrapper that
runs before upstream's hook; the conftest itself is not changed.
"""


# copyfix.upstream.ci writes its own block between these markers; write_docs keeps it.
CI_BLOCK_BEGIN, CI_BLOCK_END = "<!-- upstream-ci -->", "<!-- /upstream-ci -->"


def write_docs() -> Path:
    parts = [DOC_INTRO]
    for path in sorted(RESULTS.glob("upstream_check_*.json")):
        mode = path.stem.rsplit("_", 1)[1]
        data = json.loads(path.read_text())
        for label, sec in data["bases"].items():
            parts.append(_doc_section(mode, label, sec))
        for key in ("note", "stale_note"):  # (a results file's own words on its runs)
            if data.get(key):
                parts.append(f"**{mode} mode, {key.replace('_', ' ')}.** {data[key]}\n")
    text = DOCS.read_text() if DOCS.is_file() else ""
    start = text.find(CI_BLOCK_BEGIN)
    end = text.find(CI_BLOCK_END, start) if start >= 0 else -1
    kept = text[start : end + len(CI_BLOCK_END)] + "\n" if end >= 0 else ""
    DOCS.write_text("\n".join(parts) + ("\n" + kept if kept else ""))
    return DOCS


def _doc_section(mode: str, label: str, sec: dict) -> str:
    s, m = sec["summary"], sec["meta"]
    v = m.get("versions") or {}
    lines = [
        f"## {label}, {mode} mode",
        "",
        f"{m['date']}, {m['machine']}; torch {v.get('torch')}, triton {v.get('triton')}; "
        f"`-n {m['jobs']}`{', `--quick`' if m['quick'] else ''}; "
        f"{m['selected']} of {m['selection_size']} selected cases"
        f"{' (--limit ' + str(m['limit']) + ', one file at a time)' if m.get('limit') else ''}"
        f" in {len(m['files'])} files; wall {m['wall_s']} s "
        f"(base {m['run_wall_s']['base']} s, overlay {m['run_wall_s']['overlay']} s); "
        f"op `{(m.get('op_commit') or 'not recorded')[:12]}`.",
        "",
        _selection_note(m),
        "",
        "| fixed | regressed | pass both | fail both | skipped | cases | reached copy_ |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        f"| {s['fixed']} | {s['regressed']} | {s['pass_both']} | {s['fail_both']} | "
        f"{s['skipped']} | {s['cases']} | {s['reached_copy']} |",
        "",
        "fail both, by reason: "
        + (", ".join(f"{k} {n}" for k, n in s["fail_both_reasons"].items()) or "none"),
        "",
    ]
    per_file: dict[str, Counter] = {}
    for c in sec["cases"]:
        per_file.setdefault(c["nodeid"].split("::", 1)[0], Counter())[c["class"]] += 1
    lines += [
        "| file | " + " | ".join(CLASSES) + " |",
        "|---|" + "---:|" * len(CLASSES),
    ]
    for f, cnt in sorted(per_file.items()):
        lines.append(f"| `{f}` | " + " | ".join(str(cnt[k]) for k in CLASSES) + " |")
    lines.append("")
    for cls in ("fixed", "regressed"):
        named = [c for c in sec["cases"] if c["class"] == cls]
        lines.append(f"{cls.capitalize()}:" + ("" if named else " none"))
        for c in named:
            why = c["base" if cls == "fixed" else "overlay"].get("reason", "")
            lines.append(f"- `{c['nodeid']}`: {c['reason_class']}; {why}")
        lines.append("")
    odd = [
        f"- `{c['nodeid']}` ({c['reason_class']}): base: {c['base'].get('reason')}; "
        f"overlay: {c['overlay'].get('reason')}"
        for c in sec["cases"]
        if c["class"] == "fail_both"
        and c["reason_class"] in ("different-failure", "xpu-fault")
    ]
    if odd:
        head = "Fail both, worth a look (different failures, or the fault in both):"
        lines += [head, *odd, ""]
    return "\n".join(lines)


def _selection_note(meta: dict) -> str:
    if not meta.get("selection"):
        return "Selection: not recorded."
    path = REPO / meta["selection"]
    if not path.is_file():
        return f"Selection: `{meta['selection']}`."
    sel = json.loads(path.read_text())
    searched = sel["searched_files"]
    shown = ", ".join(f"`{Path(f).stem.removeprefix('test_')}`" for f in searched)
    return (
        f"Selection: `{meta['selection']}` ({sel['generated']}): {sel['how']}; "
        f"{len(searched)} files searched ({shown}), {sel['cases_run']} cases run, "
        f"{len(sel['cases'])} reached copy/copy_."
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="copyfix.upstream.check")
    sub = parser.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("discover", help="build results/upstream_selection_<label>.json")
    c = sub.add_parser("check", help="base vs base + overlay, XPU fault on")
    for p in (d, c):
        p.add_argument("upstream", type=Path, help="FlagGems checkout (src/, tests/)")
        p.add_argument("--mode", choices=("cpu", "cuda"), default="cpu")
        p.add_argument("-n", "--jobs", type=int, default=2, help="xdist workers")
        p.add_argument("--label", help="base label (default v<__version__>)")
        p.add_argument("--files", nargs="+", help="test files (as tests/test_x.py)")
    d.add_argument("--no-quick", dest="quick", action="store_false", default=True)
    d.add_argument("--out", help="default results/upstream_selection_<label>.json")
    d.add_argument(
        "--scan", type=int, default=1, help="first N cases per function (0: all)"
    )
    d.add_argument("--log", help="copy pytest's output here")
    q = c.add_mutually_exclusive_group()
    q.add_argument("--quick", dest="quick", action="store_true", default=None)
    q.add_argument("--no-quick", dest="quick", action="store_false")
    c.add_argument("--selection", help="default results/upstream_selection_<label>")
    c.add_argument("-k", "--keyword", help="regex on node ids, to run a subset")
    c.add_argument("--limit", type=int, help="at most N cases, one file at a time")
    c.add_argument("--results", help="default results/upstream_check_<mode>.json")
    c.add_argument("--machine", help="machine description for the report")
    c.add_argument("--log-dir", help="copy both pytest outputs here")
    c.add_argument("--no-docs", action="store_true", help="do not regenerate the docs")
    c.add_argument("--strict", action="store_true", help="exit 1 on any regression")
    sub.add_parser("docs", help="regenerate docs/UPSTREAM_CHECK.md from results/")
    sub.add_parser("reclassify", help="classify stored cases again, then the docs")
    args = parser.parse_args(argv)
    commands = {"discover": cmd_discover, "check": cmd_check, "docs": cmd_docs,
                "reclassify": cmd_reclassify}  # fmt: skip
    return commands[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
