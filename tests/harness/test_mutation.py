"""`make mutate` helpers: exclusion spans, mutant ids, test order (no mutants run)."""

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
