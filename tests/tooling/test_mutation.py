"""`make mutate` helpers: exclusion spans, mutant ids, test order (no mutants run)."""

import json
import sqlite3

import pytest

from copyfix import mutation

pytestmark = pytest.mark.harness

SOURCE = """\
LIMIT = 2**31 - 1


@decorator
def shortcut(x):
    def inner():
        return x + 1

    return inner


def kept(y):
    return y * 2
"""


def test_excluded_spans_cover_whole_definitions_and_assignments():
    spans = mutation.excluded_spans(SOURCE, {"shortcut": "why", "LIMIT": "why"})
    assert sorted(spans) == [(1, 1, "LIMIT"), (4, 9, "shortcut")]  # decorator included


def test_excluded_spans_refuse_a_name_that_is_gone():
    # a renamed function must not silently come back into the mutation scope
    with pytest.raises(SystemExit, match="renamed_away"):
        mutation.excluded_spans(SOURCE, {"renamed_away": "why"})


def test_mutant_id_survives_line_moves_but_not_content_changes():
    diff = "--- a\n+++ b\n@@ -3 +3 @@\n-    return y * 2\n+    return y / 2\n"
    mutated = mutation.mutated_line(diff)
    assert mutated == "return y / 2"
    a = mutation.mutant_id("kept", "core/Mul_Div", "    return y * 2", mutated)
    assert a == mutation.mutant_id("kept", "core/Mul_Div", "return y * 2  ", mutated)
    assert a != mutation.mutant_id("kept", "core/Mul_Div", "return y * 3", mutated)
    assert a != mutation.mutant_id("other", "core/Mul_Div", "return y * 2", mutated)


def test_config_names_existing_tests_in_a_valid_order():
    cfg = mutation.load_config()
    command = mutation.test_command(cfg)
    pairs = [tuple(a.split("::")) for a in command.split() if "::" in a]
    assert len(pairs) == len(set(pairs))  # every test of every file once
    assert {f for f, _ in pairs} == set(mutation.test_files(cfg))
    nodes = [n for _, n in pairs]
    assert nodes[: len(cfg["first"])] == cfg["first"]  # (names: every one exists)
    assert nodes[-len(cfg["last"]) :] == cfg["last"]
    for name in cfg["scopes"]:
        assert isinstance(cfg["scopes"][name]["exclude-operators"], list)


# --part and merge: two copies of one session, each running its share


def _session(path, ids, results=()):
    con = sqlite3.connect(path)
    with con:
        con.execute("CREATE TABLE work_items (job_id VARCHAR PRIMARY KEY)")
        con.execute(
            "CREATE TABLE work_results (worker_outcome VARCHAR(9), output TEXT,"
            " test_outcome VARCHAR(11), diff TEXT, job_id VARCHAR PRIMARY KEY)"
        )
        con.executemany("INSERT INTO work_items VALUES (?)", [(i,) for i in ids])
        con.executemany(
            "INSERT INTO work_results (job_id, worker_outcome, output, test_outcome)"
            " VALUES (?, ?, ?, ?)",
            results,
        )
    con.close()


def _results(path):
    con = sqlite3.connect(path)
    rows = dict(
        (r[0], r[1:])
        for r in con.execute(
            "SELECT job_id, worker_outcome, output, test_outcome FROM work_results"
        )
    )
    con.close()
    return rows


def test_part_buckets_split_the_ids_and_reject_bad_specs():
    ids = [f"{i:032x}" for i in range(200)]
    parts = [mutation.parse_part(f"{b}/4") for b in range(4)]
    owners = [[p for p in parts if mutation.in_part(i, p)] for i in ids]
    assert all(len(o) == 1 for o in owners)  # each id in exactly one bucket
    assert all(sum(mutation.in_part(i, p) for i in ids) > 20 for p in parts)
    assert mutation.parse_part("1,3/4") == ({1, 3}, 4)
    for bad in ["4/4", "0/0", "-1/2"]:
        with pytest.raises((ValueError, mutation.argparse.ArgumentTypeError)):
            mutation.parse_part(bad)


def test_defer_outside_parks_the_rest_until_undefer(tmp_path):
    ids = [f"{i:032x}" for i in range(40)]
    db = tmp_path / "session.sqlite"
    _session(db, ids, [(ids[0], "NORMAL", None, "KILLED")])
    part = mutation.parse_part("2/4")
    parked = mutation.defer_outside(db, part)
    rows = _results(db)
    outside = [i for i in ids[1:] if not mutation.in_part(i, part)]
    assert parked == len(outside) > 0
    assert {i for i, r in rows.items() if r[1] == "deferred"} == set(outside)
    assert rows[ids[0]] == ("NORMAL", None, "KILLED")
    mutation.undefer(db)
    assert _results(db) == {ids[0]: ("NORMAL", None, "KILLED")}


def test_merge_takes_the_other_copys_results_and_runs_once(tmp_path, monkeypatch):
    ids = ["a", "b", "c", "d"]
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir(), there.mkdir()
    # here: a killed, b parked for the other copy, c and d pending
    _session(
        here / "session.sqlite",
        ids,
        [("a", "NORMAL", None, "KILLED"), ("b", "SKIPPED", "deferred", None)],
    )
    # there: a survived (ignored: here has a result), b and c run, d parked
    _session(
        there / "session.sqlite",
        ids,
        [
            ("a", "NORMAL", None, "SURVIVED"),
            ("b", "NORMAL", None, "SURVIVED"),
            ("c", "NORMAL", "timeout", "KILLED"),
            ("d", "SKIPPED", "deferred", None),
        ],
    )
    (here / "run.json").write_text(json.dumps({"runs": [{"machine": "m1"}]}))
    run = {"machine": "m2", "part": "1/2"}
    (there / "run.json").write_text(json.dumps({"runs": [run], "baseline_s": 80.9}))
    monkeypatch.setattr(
        mutation, "_session_paths", lambda mode: (here, None, here / "session.sqlite")
    )
    for _ in range(2):  # a second merge adds nothing
        mutation.main(["merge", str(there)])
    assert _results(here / "session.sqlite") == {
        "a": ("NORMAL", None, "KILLED"),
        "b": ("NORMAL", None, "SURVIVED"),
        "c": ("NORMAL", "timeout", "KILLED"),
    }
    meta = json.loads((here / "run.json").read_text())
    assert meta["runs"] == [{"machine": "m1"}, {**run, "merged": True}]
    assert meta["baselines"] == {"m2": 80.9}

    _session(tmp_path / "other.sqlite", ["x"])
    (tmp_path / "other").mkdir()
    (tmp_path / "other.sqlite").rename(tmp_path / "other" / "session.sqlite")
    with pytest.raises(SystemExit, match="not a copy"):
        mutation.main(["merge", str(tmp_path / "other")])
