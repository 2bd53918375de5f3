"""A base's new section merged with what its results file held: other PRs' records kept,
records this run's budget did not reach carried from the earlier run (harness)."""

from __future__ import annotations

from pathlib import Path

from copyfix import records


def _stamped(recs: list[dict], old: dict, keep=lambda r: True) -> list[dict]:
    """``recs`` (those ``keep`` takes) stamped with the run of ``old`` unless they are."""
    stamp = {"date": old["date"], "op_commit": old.get("op_commit")}
    return [dict(r, run=r.get("run", stamp)) for r in recs if keep(r)]


def keep_other_prs(old: dict | None, new: dict) -> dict:
    """A run of some PRs (``--pr``) keeps the base's records of the other PRs, each
    stamped with its own run (``run``: date, op commit) unless it has one."""
    if not old:
        return new
    kept = [pr for pr in old.get("prs", {}) if pr not in new.get("prs", {})]
    if not kept:
        return new

    def carried(recs):
        return _stamped(recs, old, lambda r: r["pr"] in kept)

    kept_files = {f for pr in kept for f in old["prs"][pr]}
    merged = dict(new)
    merged["prs"] = {**{pr: old["prs"][pr] for pr in kept}, **new.get("prs", {})}
    merged["pr_files"] = {
        **{f: v for f, v in old.get("pr_files", {}).items() if f in kept_files},
        **new.get("pr_files", {}),
    }
    merged["invocations"] = carried(old["invocations"]) + new["invocations"]
    old_tc, new_tc = old.get("test_copy") or {}, new.get("test_copy") or {}
    if old_tc or new_tc:
        merged["test_copy"] = dict(
            new_tc or old_tc,
            with_pr=carried(old_tc.get("with_pr", [])) + new_tc.get("with_pr", []),
            without_pr=new_tc.get("without_pr", old_tc.get("without_pr", [])),
        )
    return merged


def _unreached(record: dict) -> bool:
    """Not run at all, or killed before any test finished."""
    if record.get("rc") is None:
        return True
    done = record.get("passed") or record.get("failed") or record.get("errors")
    return bool(record.get("timed_out")) and not done


def carry_unreached(old: dict | None, new: dict) -> dict:
    """``new`` with each record its run did not reach replaced by ``old``'s record of
    the same run (PR and file, or PR and command), stamped with its run and why."""
    if not old:
        return new

    def carry(records, previous, key):
        earlier = {key(r): r for r in previous}
        out = []
        for r in records:
            e = earlier.get(key(r))
            if _unreached(r) and e is not None and not _unreached(e):
                why = r.get("note") or f"rc {r.get('rc')}"
                (e,) = _stamped([e], old)
                e["carried_because"] = f"the {new['date']} run did not reach it ({why})"
                r = e
            out.append(r)
        return out

    merged = dict(new)
    merged["invocations"] = carry(
        new.get("invocations", []),
        old.get("invocations", []),
        lambda r: (r["pr"], r["file"]),
    )
    old_tc, new_tc = old.get("test_copy") or {}, new.get("test_copy") or {}
    if new_tc.get("which") == "none" and old_tc:  # (--test-copy none: none of it ran)
        prs = set(new.get("prs", {}))
        merged["test_copy"] = dict(
            old_tc,
            with_pr=_stamped(old_tc.get("with_pr", []), old, lambda r: r["pr"] in prs),
            without_pr=_stamped(old_tc.get("without_pr", []), old),
        )
    elif new_tc:
        merged["test_copy"] = dict(new_tc)
        for side in ("with_pr", "without_pr"):
            merged["test_copy"][side] = carry(
                new_tc.get(side, []),
                old_tc.get(side, []),
                lambda r: (r.get("pr"), r["command"]),
            )
    return merged


def write_results(path: Path, label: str, section: dict) -> dict:
    """Merge one base's section into ``path`` (other bases and unreached records kept)."""

    def merge(data):
        bases = dict(data.get("bases", {}))
        old = bases.get(label)
        bases[label] = keep_other_prs(old, carry_unreached(old, section))
        return {
            "mode": section["mode"],
            "machine": section["machine"],
            "op_commit": section["op_commit"],
            "bases": dict(sorted(bases.items())),
        }

    return records.update(path, merge)
