"""Mutation testing of the PR op file with cosmic-ray (`make mutate`).

Harness file (not part of the upstream PR). `python -m copyfix.mutation run`:

1. reads mutation/config.toml (target, tests and their order, exclusions, operator
   scope) and writes a cosmic-ray config and session under build/mutation/<mode>/;
2. `cosmic-ray init` lists every mutant; the names in [copyfix.exclude] and the
   scope's operator filter mark theirs skipped (recorded, not run);
3. lays out one worker folder per job: its own copy of the overlay files and of
   build/composed with the overlay symlinks pointing at that copy, so cosmic-ray's
   in-place mutation is what that worker's pytest imports, and nothing else's;
4. runs the unmutated baseline in every worker (it must pass), then `cosmic-ray exec`
   through the http distributor, one `cosmic-ray http-worker` (localhost) per folder;
5. writes results/mutation_<mode>.json and docs/MUTATION.md (`report` redoes only
   this step): score, every survivor with location and diff, and the mutants listed
   in mutation/equivalent.toml, matched by a content id (function, operator,
   original line, mutated line) that survives line moves.

`--rerun-survivors` re-executes only the survivors and errors of the existing
session (after tests were added: added tests cannot revive a killed mutant).

`--part I,J/N` runs only the pending mutants whose bucket (a hash of the job id,
mod N) is listed; the rest stay pending. Two machines can share one session that
way: each runs its part of a copy, and `merge OTHER_SESSION_DIR` takes the other's
results (for mutants still pending here) and its runs into this session.
"""

import argparse
import ast
import hashlib
import json
import os
import platform
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import tomllib

from copyfix.provenance import op_commit

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "mutation" / "config.toml"
EQUIVALENT = REPO / "mutation" / "equivalent.toml"
BIN = Path(sys.executable).parent
DOC = REPO / "docs" / "MUTATION.md"


def load_config() -> dict:
    return tomllib.loads(CONFIG.read_text())["copyfix"]


# ---------------------------------------------------------------------------
# exclusions and mutant ids
# ---------------------------------------------------------------------------


def excluded_spans(source: str, names: dict) -> list:
    """(first line, last line, name) of every def/assignment named in `names`."""
    spans = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found = [node.name]
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found = [t.id for t in targets if isinstance(t, ast.Name)]
            first = node.lineno
        else:
            continue
        spans += [(first, node.end_lineno, n) for n in found if n in names]
    missing = set(names) - {s[2] for s in spans}
    if missing:  # a renamed function must not silently come back into scope
        raise SystemExit(
            f"mutation/config.toml excludes names not in the target: {sorted(missing)}"
        )
    return spans


def mutated_line(diff: str) -> str:
    added = [
        ln[1:]
        for ln in diff.splitlines()
        if ln.startswith("+") and not ln.startswith("+++")
    ]
    return "\n".join(a.strip() for a in added)


def mutant_id(function, operator, original: str, mutated: str) -> str:
    text = "\0".join([str(function), operator, original.strip(), mutated])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def load_equivalents() -> dict:
    if not EQUIVALENT.exists():
        return {}
    entries = tomllib.loads(EQUIVALENT.read_text()).get("mutant", [])
    return {e["id"]: e for e in entries}


# ---------------------------------------------------------------------------
# workers
# ---------------------------------------------------------------------------


def _overlay_files():
    return sorted(
        p.relative_to(REPO)
        for p in (REPO / "src").rglob("*.py")
        if "__pycache__" not in p.parts
    )


def make_worker(folder: Path, tests: list) -> None:
    """A folder with its own overlay copy and a composed tree whose symlinks point at it."""
    folder = folder.resolve()  # the symlinks must be absolute
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for rel in _overlay_files():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, folder / rel)
    composed = REPO / "build" / "composed"
    if not (composed / "flag_gems").is_dir():
        raise SystemExit("build/composed is missing: run `make venv` first")
    shutil.copytree(composed, folder / "build" / "composed", symlinks=True)
    for link in (folder / "build" / "composed").rglob("*.py"):
        if link.is_symlink():
            target = Path(os.readlink(link))
            rel = target.relative_to(REPO)  # overlay links point into REPO/src
            link.unlink()
            link.symlink_to(folder / rel)
    # (tests/__init__.py: the PR tests import `from . import accuracy_utils`; each
    # test file's folder also brings its helper modules and conftest.py)
    helpers = [
        str(path.relative_to(REPO))
        for folder_of_tests in sorted({(REPO / rel).parent for rel in tests})
        for path in sorted(folder_of_tests.glob("*.py"))
        if not path.name.startswith("test_")
    ]
    for rel in dict.fromkeys(["pyproject.toml", "tests/__init__.py", *helpers, *tests]):
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, folder / rel)


def worker_env(folder: Path, cfg: dict, mode: str) -> dict:
    env = dict(os.environ)
    # the worker's composed tree comes before the editable install's .pth entries
    env["PYTHONPATH"] = os.pathsep.join(
        [str(folder / "build" / "composed"), str(REPO / "harness")]
    )
    env["COPYFIX_EMULATION"] = mode
    env["CI"] = "true"  # hypothesis: derandomized, no example database
    env["GEMS_COPY_FUZZ_EXAMPLES"] = str(cfg["fuzz_examples"])
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = "1"  # one core per worker
    return env


def test_files(cfg: dict) -> list:
    """The test files that must kill the mutants (config `tests`: a path or a list)."""
    tests = cfg["tests"]
    return [tests] if isinstance(tests, str) else list(tests)


def _test_names(path: str) -> list:
    tree = ast.parse((REPO / path).read_text())
    names = [
        n.name
        for n in tree.body
        if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")
    ]
    names += [  # tests defined under `if hypothesis ...:`
        n.name
        for top in tree.body
        if isinstance(top, ast.If)
        for n in top.orelse + top.body
        if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")
    ]
    return list(dict.fromkeys(names))


def test_command(cfg: dict) -> str:
    """pytest -x over every test of the files: `first` names, the rest in file order,
    then `last` (a name is looked up in the files in their order)."""
    nodes = [(f, n) for f in test_files(cfg) for n in _test_names(f)]
    where = {}
    for f, n in nodes:
        where.setdefault(n, (f, n))
    unknown = [n for n in cfg["first"] + cfg["last"] if n not in where]
    if unknown:  # ordering only: a test that is not there is not run
        print(
            f"note: mutation/config.toml orders tests its files lack: {unknown}",
            file=sys.stderr,
        )
    first = [where[n] for n in cfg["first"] if n in where]
    last = [where[n] for n in cfg["last"] if n in where]
    middle = [x for x in nodes if x not in first and x not in last]
    order = " ".join(f"{f}::{n}" for f, n in first + middle + last)
    return f"{BIN / 'python'} -m pytest -x -q -p no:cacheprovider {order}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc, grace_s: float) -> None:
    """Terminate `proc`, and kill it if it has not exited after `grace_s` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait_port(port: int, proc, seconds=60) -> None:
    end = time.time() + seconds
    while time.time() < end:
        if proc.poll() is not None:
            raise SystemExit(
                f"http-worker on port {port} exited with {proc.returncode}"
            )
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise SystemExit(f"http-worker on port {port} did not start")


# ---------------------------------------------------------------------------
# session
# ---------------------------------------------------------------------------


def _session_paths(mode: str):
    root = REPO / "build" / "mutation" / mode
    return root, root / "cosmic-ray.toml", root / "session.sqlite"


def write_cr_config(path: Path, cfg: dict, scope: str, urls: list) -> None:
    ops = cfg["scopes"][scope]["exclude-operators"]
    lines = [
        "[cosmic-ray]",
        f"module-path = {json.dumps(cfg['target'])}",
        f"timeout = {float(cfg['timeout'])}",
        "excluded-modules = []",
        f"test-command = {json.dumps(test_command(cfg))}",
        "",
        "[cosmic-ray.distributor]",
        'name = "http"',
        "",
        "[cosmic-ray.distributor.http]",
        f"worker-urls = {json.dumps(urls)}",
        "",
        "[cosmic-ray.filters.operators-filter]",
        "exclude-operators = [" + ", ".join(f"'{o}'" for o in ops) + "]",
        "",
    ]
    path.write_text("\n".join(lines))


def _run(cmd, **kw):
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, **kw)


def _skip_pending(session: Path, reason_at) -> None:
    """Mark pending mutants skipped where ``reason_at(line)`` gives a reason."""
    from cosmic_ray.work_db import use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    with use_db(str(session)) as db:
        for item in list(db.pending_work_items):
            reason = reason_at(item.mutations[0].start_pos[0])
            if reason is not None:
                result = WorkResult(output=reason, worker_outcome=WorkerOutcome.SKIPPED)
                db.set_result(item.job_id, result)


def _spans(cfg: dict, names) -> list:
    return excluded_spans((REPO / cfg["target"]).read_text(), names)


def skip_excluded(session: Path, cfg: dict) -> None:
    """Mark the mutants inside [copyfix.exclude] spans skipped, with the reason."""
    spans = _spans(cfg, cfg["exclude"])

    def reason_at(line):
        inside = [name for first, last, name in spans if first <= line <= last]
        return f"excluded: {inside[0]}" if inside else None

    _skip_pending(session, reason_at)


def skip_outside(session: Path, cfg: dict, names: list) -> None:
    """--only: mark the mutants outside the named defs/assignments skipped (a budgeted
    run of what changed; the report says which names were in scope)."""
    spans = _spans(cfg, dict.fromkeys(names, ""))
    reason = "excluded: outside --only " + " ".join(names)
    _skip_pending(
        session,
        lambda line: (
            None if any(first <= line <= last for first, last, _ in spans) else reason
        ),
    )


def reset_survivors(session: Path, mode: str) -> int:
    """Make the survivors (not those listed as equivalent) and the errors pending
    again, and only them: what else is pending is parked as 'deferred' until
    undefer()."""
    found = collect(mode)
    ids = [m["job_id"] for m in found["survivors"] + found["errors"]]
    _park_pending(session, lambda job_id: False)
    con = sqlite3.connect(session)
    with con:
        con.executemany(
            "DELETE FROM work_results WHERE job_id = ?", [(i,) for i in ids]
        )
    con.close()
    return len(ids)


def _park_pending(session: Path, keep) -> int:
    """Park the pending mutants for which ``keep(job_id)`` is false as 'deferred'
    (until undefer())."""
    con = sqlite3.connect(session)
    with con:
        pending = [
            r[0]
            for r in con.execute(
                "SELECT job_id FROM work_items WHERE job_id NOT IN"
                " (SELECT job_id FROM work_results)"
            )
        ]
        parked = [(i,) for i in pending if not keep(i)]
        con.executemany(
            "INSERT INTO work_results (job_id, worker_outcome, output)"
            " VALUES (?, 'SKIPPED', 'deferred')",
            parked,
        )
    con.close()
    return len(parked)


def in_part(job_id: str, part) -> bool:
    buckets, n = part
    return int(hashlib.sha256(job_id.encode()).hexdigest(), 16) % n in buckets


def parse_part(text: str):
    """'1,2/4' -> ({1, 2}, 4)."""
    listed, n = text.split("/")
    n, buckets = int(n), {int(b) for b in listed.split(",")}
    if n < 1 or not buckets or not buckets <= set(range(n)):
        raise argparse.ArgumentTypeError(f"--part {text}: buckets must lie in 0..N-1")
    return buckets, n


def defer_outside(session: Path, part) -> int:
    """Park the pending mutants outside ``part`` as 'deferred' (until undefer())."""
    return _park_pending(session, lambda job_id: in_part(job_id, part))


def merge(args) -> int:
    """Take another copy's results for the mutants still pending here, and its runs."""
    root, _, session = _session_paths(args.mode)
    other = Path(args.other)
    con = sqlite3.connect(session)
    with con:
        con.execute("ATTACH DATABASE ? AS other", (str(other / "session.sqlite"),))
        same = con.execute(
            "SELECT count(*) FROM other.work_items o JOIN work_items w USING (job_id)"
        ).fetchone()[0]
        total = con.execute("SELECT count(*) FROM work_items").fetchone()[0]
        if same != total:
            raise SystemExit(f"{other} is not a copy of this session ({same}/{total})")
        # pending here, or parked here by --part while the other copy ran it
        taken = con.execute(
            "INSERT OR REPLACE INTO work_results"
            " (worker_outcome, output, test_outcome, diff, job_id)"
            " SELECT worker_outcome, output, test_outcome, diff, job_id"
            " FROM other.work_results WHERE output IS NOT 'deferred' AND job_id NOT IN"
            " (SELECT job_id FROM work_results WHERE output IS NOT 'deferred')"
        ).rowcount
    con.close()
    meta_path = root / "run.json"
    meta = json.loads(meta_path.read_text())
    theirs = json.loads((other / "run.json").read_text())
    for r in theirs["runs"]:
        if {**r, "merged": True} not in meta["runs"]:
            meta["runs"].append({**r, "merged": True})
    meta.setdefault("baselines", {})[theirs["runs"][-1]["machine"]] = theirs.get(
        "baseline_s"
    )
    meta_path.write_text(json.dumps(meta, indent=2))
    print(f"merged {taken} results from {other}")
    return 0


def undefer(session: Path) -> None:
    con = sqlite3.connect(session)
    with con:
        con.execute("DELETE FROM work_results WHERE output = 'deferred'")
    con.close()


def run(args) -> int:
    cfg = load_config()
    root, cr_config, session = _session_paths(args.mode)
    root.mkdir(parents=True, exist_ok=True)
    started = time.time()
    ports = [_free_port() for _ in range(args.jobs)]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    write_cr_config(cr_config, cfg, args.scope, urls)
    cr = BIN / "cosmic-ray"
    meta_path = root / "run.json"
    if args.rerun_survivors or args.resume:
        if not session.exists():
            raise SystemExit(f"no session at {session}: run without --resume first")
        undefer(session)  # what a run killed before its `finally` left parked
        if args.rerun_survivors:
            print(
                f"re-running {reset_survivors(session, args.mode)} survivors",
                flush=True,
            )
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {"runs": []}
    else:
        session.unlink(missing_ok=True)
        _run([cr, "init", cr_config, session])
        _run([BIN / "cr-filter-operators", session, cr_config])
        skip_excluded(session, cfg)
        if args.only:
            skip_outside(session, cfg, args.only)
        meta = {"runs": [], "only": args.only}
        # written now, so that a run stopped before its end leaves this session's
        # metadata, not the previous session's, for `report`
        meta_path.write_text(json.dumps(meta, indent=2))
    tests = test_files(cfg)
    workers = []
    try:
        for i, port in enumerate(ports):
            folder = root / f"w{i}"
            make_worker(folder, tests)
            env = worker_env(folder, cfg, args.mode)
            check = "import importlib.util as u; print(u.find_spec('flag_gems').origin)"
            origin = subprocess.run(
                [BIN / "python", "-c", check],
                env=env,
                cwd=folder,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            if not origin.startswith(str(folder)):
                raise SystemExit(
                    f"worker {i} imports flag_gems from {origin}, not its own copy"
                )
            log = open(folder / "worker.log", "w")  # noqa: SIM115 - closed with the worker
            proc = subprocess.Popen(
                [cr, "http-worker", "--port", str(port)],
                cwd=folder,
                env=env,
                stdout=log,
                stderr=log,
            )
            workers.append((proc, log))
            _wait_port(port, proc)
        if "baseline_s" not in meta:
            print("baseline (unmutated) in every worker ...", flush=True)
            base = time.time()
            procs = [
                subprocess.Popen(
                    test_command(cfg).split(),
                    cwd=root / f"w{i}",
                    env=worker_env(root / f"w{i}", cfg, args.mode),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
                for i in range(args.jobs)
            ]
            for i, p in enumerate(procs):
                out, _ = p.communicate()
                if p.returncode != 0:
                    print(out[-4000:])
                    raise SystemExit(
                        f"baseline failed in worker {i}: fix the tests before mutating"
                    )
            meta["baseline_s"] = round(time.time() - base, 1)
            print(f"baseline passed in {meta['baseline_s']} s", flush=True)
            meta_path.write_text(json.dumps(meta, indent=2))
        if args.part:
            print(f"--part: {defer_outside(session, args.part)} deferred", flush=True)
        # cosmic-ray takes pending mutants in random order, so a run cut short by
        # --budget-min has run a uniform random sample; --resume goes on.
        cmd = [str(cr), "exec", str(cr_config), str(session)]
        print("+", " ".join(cmd), flush=True)
        proc = subprocess.Popen(cmd)
        try:
            proc.wait(timeout=args.budget_min * 60 if args.budget_min else None)
        except subprocess.TimeoutExpired:
            print(f"budget of {args.budget_min} min spent: stopping (--resume goes on)")
            _stop(proc, grace_s=30)
    finally:
        if args.rerun_survivors or args.part:
            undefer(session)
        for proc, _ in workers:  # all at once: one grace for all, not one each
            proc.terminate()
        for proc, log in workers:
            _stop(proc, grace_s=10)
            log.close()
    meta["runs"].append(
        {
            "kind": "rerun-survivors"
            if args.rerun_survivors
            else "resume"
            if args.resume
            else "new",
            "budget_min": args.budget_min,
            "part": args.part_text,
            "scope": args.scope,
            "jobs": args.jobs,
            "wall_s": round(time.time() - started, 1),
            "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": f"{platform.node()} ({os.cpu_count()} CPUs, {platform.machine()})",
            "torch": _version("torch"),
            "triton": _version("triton"),
        }
    )
    meta["scope"] = args.scope
    meta_path.write_text(json.dumps(meta, indent=2))
    return report(args)


# ---------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------


def collect(mode: str) -> dict:
    from cosmic_ray.work_db import WorkDB, use_db

    cfg = load_config()
    root, _, session = _session_paths(mode)
    meta_path = root / "run.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {"runs": []}
    source = (REPO / cfg["target"]).read_text()
    lines = source.splitlines()
    decorated = _decorator_lines(source)
    equivalents = load_equivalents()
    counts = {
        k: 0
        for k in (
            "killed",
            "timeout",
            "survived",
            "equivalent",
            "excluded",
            "error",
            "pending",
        )
    }
    survivors, equivalent, errors, excluded = [], [], [], {}
    with use_db(str(session), WorkDB.Mode.open) as db:
        done = list(db.completed_work_items)
        counts["pending"] = sum(1 for _ in db.pending_work_items)
    for item, result in done:
        m = item.mutations[0]
        outcome = result.worker_outcome.value
        if outcome == "skipped":
            counts["excluded"] += 1
            why = result.output or "excluded"
            excluded[why] = excluded.get(why, 0) + 1
            continue
        if outcome == "no-test":
            continue
        line, col = m.start_pos
        original = lines[line - 1] if line <= len(lines) else ""
        entry = {
            "job_id": item.job_id,
            # cosmic-ray names no function for a decorator line: name the decorated one
            "function": m.definition_name or decorated.get(m.start_pos[0]),
            "operator": m.operator_name,
            "occurrence": m.occurrence,
            "location": f"{cfg['target']}:{line}:{col}",
            "line": original.strip(),
        }
        if outcome != "normal" or result.test_outcome.value == "incompetent":
            counts["error"] += 1
            errors.append({**entry, "output": (result.output or "")[-2000:]})
            continue
        if result.test_outcome.value == "killed":
            counts["timeout" if result.output == "timeout" else "killed"] += 1
            continue
        mutated = mutated_line(result.diff or "")
        entry.update(
            id=mutant_id(entry["function"], m.operator_name, original, mutated),
            mutated=mutated,
        )
        entry["diff"] = result.diff
        if entry["id"] in equivalents:
            counts["equivalent"] += 1
            equivalent.append({**entry, "reason": equivalents[entry["id"]]["reason"]})
        else:
            counts["survived"] += 1
            survivors.append(entry)
    tested = counts["killed"] + counts["timeout"] + counts["survived"]
    score = (counts["killed"] + counts["timeout"]) / tested if tested else None
    stale = sorted(set(equivalents) - {e["id"] for e in equivalent})
    return {
        "tool": "cosmic-ray " + _version("cosmic-ray"),
        "mode": mode,
        "target": cfg["target"],
        # the target's last commit and content as reported (the session mutated them)
        "op_commit": op_commit(cfg["target"]),
        "target_sha256": hashlib.sha256(source.encode()).hexdigest(),
        "tests": cfg["tests"],
        "scope": meta.get("scope"),
        "fuzz_examples": cfg["fuzz_examples"],
        "timeout_s": cfg["timeout"],
        "score": None if score is None else round(score, 4),
        "score_definition": "(killed + timeout) / (killed + timeout + survived); equivalent mutants left out",
        "counts": counts,
        "excluded": excluded,
        "baseline_s": meta.get("baseline_s"),
        "baselines": meta.get("baselines", {}),
        "runs": meta["runs"],
        "survivors": sorted(survivors, key=_line_of),
        "equivalent": sorted(equivalent, key=_line_of),
        "equivalent_list_entries_not_seen": stale,
        "errors": errors,
    }


def _decorator_lines(source: str) -> dict:
    """{line of a decorator: name of the function it decorates}."""
    found = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for d in node.decorator_list:
                for line in range(d.lineno, d.end_lineno + 1):
                    found[line] = node.name
    return found


def _line_of(entry) -> tuple:
    _, line, col = entry["location"].rsplit(":", 2)
    return int(line), int(col), entry["operator"]


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)


def render(data: dict) -> str:
    c = data["counts"]
    score = "n/a" if data["score"] is None else f"{100 * data['score']:.1f}%"
    out = [
        "# Mutation testing of the KunlunXIN `copy_`",
        "",
        "<!-- generated by `make mutate` (harness/copyfix/mutation.py); do not edit by hand -->",
        "",
        f"Tool: {data['tool']}, mode `{data['mode']}`, scope `{data['scope']}` "
        f"(mutation/config.toml), target `{data['target']}`, tests `{data['tests']}` only "
        f"(`pytest -x`, fuzz at {data['fuzz_examples']} derandomized examples, "
        f"{data['timeout_s']} s per mutant).",
        "",
        f"**Score: {score}** — killed {c['killed']}, timeouts {c['timeout']}, survived "
        f"{c['survived']}, equivalent {c['equivalent']} (mutation/equivalent.toml), "
        f"errors {c['error']}, not run {c['excluded']} (excluded), pending {c['pending']}.",
        "",
        "| run | part | scope | workers | wall time | finished | machine | torch, triton |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in data["runs"]:
        kind = r["kind"] + (" (merged)" if r.get("merged") else "")
        versions = f"{r['torch']}, {r['triton']}" if r.get("torch") else "n/a"
        out.append(
            f"| {kind} | {r.get('part') or 'all'} | {r['scope']} | {r['jobs']} "
            f"| {r['wall_s']:.0f} s | {r['finished']} | {r['machine']} | {versions} |"
        )
    notes = [
        f"- the {r['kind']} run finished {r['finished']}: {r['note']}."
        for r in data["runs"]
        if r.get("note")
    ]
    out += ["", "Notes:", ""] + notes if notes else []
    if data.get("baselines"):
        out += [
            "",
            "Unmutated baseline: "
            + "; ".join(
                [f"{data['baseline_s']} s here"]
                + [f"{s} s on {m}" for m, s in data["baselines"].items()]
            )
            + ".",
        ]
    in_scope = sum(c[k] for k in ("killed", "timeout", "survived", "equivalent"))
    if c["pending"]:
        out += [
            "",
            f"**Sample:** {in_scope} of the {in_scope + c['pending']} mutants in scope "
            "have run. cosmic-ray takes pending mutants in random order, so they are a "
            "uniform random sample; `--resume` runs the rest.",
        ]
    out += ["", "Excluded (mutants not run):", ""]
    out += [f"- {why}: {n}" for why, n in sorted(data["excluded"].items())]
    out += ["", "## Survivors", ""]
    if not data["survivors"]:
        out.append("None.")

    def mutant(m):
        return (
            f"- `{m['id']}` {m['location']} in `{m['function'] or '<module>'}` "
            f"({m['operator']}): `{m['line']}` → `{m['mutated']}`"
        )

    out += [mutant(s) for s in data["survivors"]]
    out += ["", "## Equivalent mutants (reviewed: mutation/equivalent.toml)", ""]
    if not data["equivalent"]:
        out.append("None.")
    out += [f"{mutant(e)}. {e['reason']}" for e in data["equivalent"]]
    if data["equivalent_list_entries_not_seen"]:
        out += [
            "",
            "Listed as equivalent but not surviving in this run (stale entries?): ",
        ]
        out += [f"`{i}`" for i in data["equivalent_list_entries_not_seen"]]
    if data["errors"]:
        out += ["", "## Errors", ""]
        out += [f"- {e['location']} ({e['operator']})" for e in data["errors"]]
    out += [
        "",
        "## Re-running",
        "",
        "```bash",
        "make mutate JOBS=2                         # this machine (2 cores), scope quick",
        "make mutate JOBS=16                        # a 16-core machine",
        "make mutate JOBS=16 MUTATE_ARGS='--scope full'",
        "make mutate MUTATE_ARGS=--rerun-survivors  # after adding tests",
        "# two machines, one session: each runs its hash buckets of a copy, then",
        "make mutate MUTATE_ARGS='--resume --part 0/4'  # here; the device: harness/device/mutate.sh",
        ".venv/bin/python -m copyfix.mutation merge <returned folder>",
        "```",
        "",
    ]
    return "\n".join(out)


def report(args) -> int:
    data = collect(args.mode)
    out = REPO / "results" / f"mutation_{args.mode}.json"
    out.write_text(json.dumps(data, indent=2) + "\n")
    DOC.write_text(render(data))
    c = data["counts"]
    print(f"wrote {out.relative_to(REPO)} and {DOC.relative_to(REPO)}")
    print(
        f"score {data['score']}: killed {c['killed']} timeout {c['timeout']} survived {c['survived']} "
        f"equivalent {c['equivalent']} error {c['error']} excluded {c['excluded']} pending {c['pending']}"
    )
    for s in data["survivors"]:
        print(
            f"  SURVIVED {s['id']} {s['location']} {s['operator']}: {s['line']} -> {s['mutated']}"
        )
    return 1 if c["survived"] or c["error"] or c["pending"] else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m copyfix.mutation", description=__doc__.splitlines()[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="run the mutants and write the report")
    p_run.add_argument(
        "--jobs", type=int, default=2, help="parallel workers (one folder each)"
    )
    p_run.add_argument("--mode", default="cpu", choices=["cpu", "cuda", "native"])
    p_run.add_argument("--scope", default="quick", choices=["quick", "full"])
    p_run.add_argument(
        "--rerun-survivors",
        action="store_true",
        help="reset the survivors and errors, run them",
    )
    p_run.add_argument(
        "--resume", action="store_true", help="run what the session has pending"
    )
    p_run.add_argument(
        "--budget-min", type=float, default=0, help="stop after N minutes (0: none)"
    )
    p_run.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        help="mutate only inside these functions/assignments (a run of what changed)",
    )
    p_run.add_argument(
        "--part",
        dest="part_text",
        metavar="I,J/N",
        help="run only the pending mutants in these hash buckets of N (see merge)",
    )
    p_rep = sub.add_parser(
        "report", help="rewrite the JSON and docs from the last session"
    )
    p_rep.add_argument("--mode", default="cpu", choices=["cpu", "cuda", "native"])
    p_merge = sub.add_parser(
        "merge", help="take another copy's results (its --part) into this session"
    )
    p_merge.add_argument("other", help="the other copy's build/mutation/<mode> folder")
    p_merge.add_argument("--mode", default="cpu", choices=["cpu", "cuda", "native"])
    args = parser.parse_args(argv)
    if args.command == "run":
        args.part = parse_part(args.part_text) if args.part_text else None
        return run(args)
    return merge(args) if args.command == "merge" else report(args)


if __name__ == "__main__":
    sys.exit(main())
