"""The README and the docs pages against pyproject.toml and the code.

Every stack fact the pages state (the number of PRs, each PR's name, order and needs,
the PR-text limits, PR 1's changed lines, the ``*.py.patch`` files and their PRs), every
``copyfix.*`` name, Make target, ``python -m`` module, repository path and ``PRS=``
example they cite, and what they say CI runs, is checked here against the code's own
tables and constants, so a page cannot drift from them.
"""

import ast
import glob
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from copyfix import export
from copyfix.upstream.ci import InputError, pr_names

REPO = export.REPO
PAGES = ["README.md", "docs/CONTRIBUTING.md", "docs/MAINTAINERS.md", "docs/HARNESS.md"]
HARNESS = REPO / "harness" / "copyfix"
WORKFLOW = REPO / ".github" / "workflows" / "kunlunxin-copy.yaml"
NUMBERS = "zero one two three four five six seven eight nine ten eleven twelve".split()


def text(page: str) -> str:
    return (REPO / page).read_text()


def all_text() -> str:
    return "\n".join(text(p) for p in PAGES)


def code_spans(page_text: str) -> list[str]:
    """Inline code spans and the lines of fenced blocks."""
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", page_text, re.S | re.M)
    rest = re.sub(r"^```[^\n]*\n.*?^```", "", page_text, flags=re.S | re.M)
    lines = [line for block in fenced for line in block.splitlines()]
    return lines + re.findall(r"`([^`\n]+)`", rest)


def tracked() -> list[str]:
    out = subprocess.run(
        ["git", "-C", str(REPO), "ls-files"], capture_output=True, text=True, check=True
    ).stdout.split()
    return [f for f in out if (REPO / f).exists()]


def make_targets() -> set[str]:
    makefile = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([a-z][\w-]*):(?!=)", makefile, re.M))


# --- the stack ---------------------------------------------------------------------


def test_pages_exist_and_the_readme_links_them():
    readme = text("README.md")
    for page in PAGES[1:]:
        assert (REPO / page).is_file(), page
        assert f"]({page})" in readme, f"README does not link {page}"


def test_the_readme_leads_with_the_two_commands():
    head = "\n".join(text("README.md").splitlines()[:32])
    for command in ("make demo", "make test"):
        assert command in head, f"{command} not in the README's first 32 lines"


@pytest.mark.parametrize("page", PAGES)
def test_stack_lists_name_every_pr_in_order_with_its_needs(page):
    """A list of ``n. **`name`** (needs m)`` items is the whole stack, as pyproject has it."""
    items = re.findall(
        r"^(\d+)\. \*\*`([\w-]+)`\*\*( \(needs [\d, ]+\))?", text(page), re.M
    )
    if not items:
        return
    prs = list(export.PRS.values())
    assert [(int(n), name) for n, name, _ in items] == [(p.n, p.name) for p in prs]
    for (_, name, needs), pr in zip(items, prs, strict=True):
        stated = [int(x) for x in re.findall(r"\d+", needs)]
        assert [export.PRS[n].n for n in pr.needs] == stated, (name, needs)


def test_pr_counts_and_ranges_match_the_stack():
    n, found = len(export.PRS), 0
    for page in PAGES:
        body = text(page)
        for word in re.findall(r"\b(\w+) (?:small )?(?:upstream )?PRs\b", body):
            count = (
                int(word)
                if word.isdigit()
                else NUMBERS.index(word)
                if word in NUMBERS
                else None
            )
            if count is not None:
                found += 1
                assert count == n, f"{page}: '{word} PRs', the stack has {n}"
        for last in re.findall(r"PR ?1\s*(?:–|-|to)\s*PR ?(\d+)\b", body):
            found += 1
            assert int(last) == n, f"{page}: PR1 to PR{last}, the stack has {n}"
        for last in re.findall(r"docs/PR1\.md`? to `?docs/PR(\d+)\.md", body):
            found += 1
            assert int(last) == n, f"{page}: docs/PR1.md to docs/PR{last}.md"
            assert (REPO / f"docs/PR{last}.md").is_file()
        for cited in re.findall(r"\bPR (\d+)\b", body):
            assert 1 <= int(cited) <= n, f"{page}: PR {cited}, the stack has {n}"
    assert found, "no page states how many PRs the stack has"


def test_pr_numbers_and_names_agree():
    """``PR n (name`` in the pages and in pyproject's comments names PR n."""
    names = {pr.n: pr.name for pr in export.PRS.values()}
    for page in [*PAGES, "pyproject.toml"]:
        for n, name in re.findall(r"\bPR (\d+) \(`?([\w-]+)", text(page)):
            if name in export.PRS:
                assert names[int(n)] == name, (
                    f"{page}: PR {n} ({name}), is {names[int(n)]}"
                )


def test_pr_text_limits_are_the_codes():
    """``N lines (`copyfix.x.CONST`)``: N is that constant; no limit stated otherwise."""
    cited = set()
    for page in PAGES:
        body = re.sub(r"\s+", " ", text(page))
        for number, ref in re.findall(
            r"\b(\d+)(?: [a-z]+){0,3} \(`(copyfix\.[\w.]+)`\)", body
        ):
            module, _, name = ref.rpartition(".")
            if module != "copyfix.export":
                continue
            value = getattr(export, name)
            if isinstance(value, int):
                cited.add(name)
                assert int(number) == value, f"{page}: {number} for {ref} = {value}"
        bare = re.findall(
            r"at most (\d+) (?:lines|rows)(?![a-z ]{0,20}\(`copyfix)", body
        )
        assert not bare, f"{page}: a limit not tied to the code's constant: {bare}"
    assert {"MAX_LINES", "MAX_PERFORMANCE_LINES"} <= cited


def test_stated_changed_lines_are_the_patches():
    """``path.patch` (N changed lines`` and ``path.patch`, N changed lines``."""
    patches = [f for f in tracked() if f.endswith(".patch")]
    seen = set()
    for page in PAGES:
        body = re.sub(r"\s+", " ", text(page))
        for cited, number in re.findall(
            r"`([^`\s]+\.patch)`(?: \(|, )(\d+) changed lines", body
        ):
            suffix = cited.removeprefix("...")
            found = [
                f
                for f in patches
                if f == suffix or f.endswith("/" + suffix.lstrip("/"))
            ]
            assert len(found) == 1, f"{page}: {cited} is {found}"
            assert export.changed_lines(REPO / found[0]) == int(number), (
                f"{page}: {cited} has {export.changed_lines(REPO / found[0])} changed "
                f"lines, not {number}"
            )
            seen.add(found[0])
    pr1 = export.PRS["strided-copy"]
    for head in (False, True):
        path = str(pr1.patch_file(export.COPY_PY, head).relative_to(REPO))
        assert path in seen, f"no page states {path}'s changed lines"


def test_every_composed_py_patch_is_named_with_its_pr():
    """The composer applies every ``src/**/*.py.patch``: the pages say whose each is."""
    stated = set()
    for page in PAGES:
        stated |= set(re.findall(r"\bPR (\d+)'s `([^`]+\.py\.patch)`", text(page)))
    patches = sorted((REPO / "src").rglob("*.py.patch"))
    assert patches
    for n, path in stated:  # (each stated owner is the right one)
        found = [p for p in patches if str(p).endswith("/" + path)]
        assert len(found) == 1, f"PR {n}'s {path} is {found}"
        rel = str(found[0].relative_to(REPO))[: -len(".patch")]
        assert rel in export.PRS[list(export.PRS)[int(n) - 1]].patched, (
            f"PR {n}'s {path}"
        )
    for patch in patches:
        rel = str(patch.relative_to(REPO))[: -len(".patch")]
        owner = [
            p
            for p in export.PRS.values()
            if rel in p.patched and p.patch_file(rel) == patch
        ]
        assert len(owner) == 1, (patch, owner)
        assert any(
            int(n) == owner[0].n and str(patch).endswith("/" + path)
            for n, path in stated
        ), f"no page names {patch.name} as PR {owner[0].n}'s"


# --- names, targets, commands, paths -----------------------------------------------


def _module_file(parts: list[str]) -> Path | None:
    path = HARNESS.joinpath(*parts)
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _defines(tree: ast.AST, name: str) -> ast.AST | None:
    for node in getattr(tree, "body", []):
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == name:
            return node
        targets = []
        if isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            targets = [node.target.id]
        elif isinstance(node, ast.Import | ast.ImportFrom):
            targets = [(a.asname or a.name).split(".")[0] for a in node.names]
        if name in targets:
            return node
    return None


def resolve(ref: str) -> bool:
    """``copyfix.a.b.name[.attr]``: a module of the harness and what it defines."""
    parts = ref.split(".")[1:]
    for cut in range(len(parts), -1, -1):
        module = _module_file(parts[:cut]) if cut else HARNESS / "__init__.py"
        if module is None:
            continue
        node = ast.parse(module.read_text())
        for name in parts[cut:]:
            node = _defines(node, name)
            if node is None:
                return False
        return True
    return False


def test_every_copyfix_name_exists():
    refs = set(re.findall(r"(?<![\w.-])copyfix(?:\.\w+)+", all_text()))
    assert refs
    missing = sorted(r for r in refs if not resolve(r))
    assert not missing, f"the pages cite names the code lacks: {missing}"


def _commands() -> list[tuple[str, str]]:
    out = []
    for page in PAGES:
        for span in code_spans(text(page)):
            for part in re.split(r"&&|;|#", span.split(" # ")[0]):
                if part.strip():
                    out.append((page, part.strip()))
    return out


def test_every_make_command_is_a_target_with_known_variables():
    targets, makefile = make_targets(), (REPO / "Makefile").read_text()
    harness_src = "\n".join(p.read_text() for p in HARNESS.rglob("*.py"))
    seen = 0
    for page, command in _commands():
        words = command.split()
        if "make" not in words:
            continue
        i = words.index("make")
        if i + 1 == len(words):
            continue
        seen += 1
        target = words[i + 1]
        assert target in targets, f"{page}: `make {target}` is no Make target"
        for word in words[:i] + words[i + 2 :]:
            var = re.match(r"\[?([A-Z][A-Z0-9_]*)=", word)
            if var:
                name = var.group(1)
                assert f"$({name})" in makefile or name in harness_src, (
                    f"{page}: {name}= in `{command}` is read by neither the Makefile "
                    "nor the harness"
                )
    assert seen


def test_every_python_module_command_exists_and_runs_as_main():
    for page, command in _commands():
        for module in re.findall(r"python -m (copyfix[\w.]*)", command):
            path = _module_file(module.split(".")[1:])
            assert path is not None, f"{page}: no module {module}"
            main = path.parent / "__main__.py" if path.name == "__init__.py" else None
            runs = (main and main.is_file()) or "__main__" in path.read_text()
            assert runs, f"{page}: {module} has no command line"
            sub = re.search(rf"python -m {re.escape(module)} ([a-z][\w-]*)", command)
            if sub and path.name == "__init__.py" and module == "copyfix.export":
                assert sub.group(1) in ("patch", "pr", "apply-pr"), command


def test_pyproject_tables_cited_exist():
    table = export._copyfix_table()
    for name in re.findall(r"\[\[?tool\.copyfix\.([\w-]+)\]", all_text()):
        assert name in table, f"pyproject.toml has no [tool.copyfix.{name}]"


def test_console_scripts_cited_exist():
    scripts = re.findall(r"^([\w-]+) = \"copyfix", text("pyproject.toml"), re.M)
    assert scripts
    for script in scripts:
        assert script in all_text()
    for page, command in _commands():
        first = command.split()[0]
        if first.startswith("flaggems-"):
            assert first in scripts, f"{page}: {first} is no console script"


def _path_like(span: str) -> list[str]:
    out = []
    for token in span.split():
        token = token.strip("(),;:")
        if "/" not in token or "<" in token or "=" in token or "://" in token:
            continue
        if token.startswith(("results/", "build/", ".upstream/", "/", "#")):
            continue  # (records change under the pages; build outputs; absolute paths)
        if (
            re.search(r"\.(py|md|toml|sh|patch|yaml|json|png|mjs)$|/$", token)
            or token == ".ci/run"
        ):
            out.append(token)
    return out


def _expand(token: str) -> list[str]:
    m = re.match(r"(.*)\{([^}]*)\}(.*)", token)
    if m:
        return [m.group(1) + part + m.group(3) for part in m.group(2).split(",")]
    return [token]


# paths of upstream FlagGems, not of this repository
UPSTREAM_PATHS = {"tools/test-op.sh", "tests/test_copy.py", "benchmark/test_copy.py"}


def test_every_repository_path_exists():
    files = tracked()
    dirs = {str(Path(f).parent) + "/" for f in files}
    dirs |= {d for f in files for d in (str(p) + "/" for p in Path(f).parents)}
    missing = []
    for page in PAGES:
        for span in code_spans(text(page)):
            for token in _path_like(span):
                if token in UPSTREAM_PATHS:
                    continue
                for path in _expand(token.removeprefix("...")):
                    if "*" in path:
                        ok = bool(glob.glob(str(REPO / path)))
                    elif path.endswith("/"):
                        ok = path in dirs or any(d.endswith("/" + path) for d in dirs)
                    else:
                        ok = (REPO / path).is_file() or any(
                            f.endswith("/" + path.lstrip("/")) for f in files
                        )
                    if not ok:
                        missing.append(f"{page}: {path}")
    assert not missing, missing


# --- PRS= examples ------------------------------------------------------------------


def _prs_examples() -> list[tuple[str, list[str]]]:
    out = []
    for source in [*PAGES, "Makefile"]:
        for names in re.findall(r"PRS=[\"']([^\"']*)[\"']", text(source)):
            out.append((source, names.split()))
    return out


def test_prs_examples_pass_upstream_cis_pr_name_check():
    examples = _prs_examples()
    assert {source for source, _ in examples} >= {"Makefile", "docs/MAINTAINERS.md"}
    for source, names in examples:
        assert names, source
        assert pr_names(names) == names, source


def test_the_pr_name_check_refuses_an_unknown_name():
    with pytest.raises(InputError, match="unknown PR kunlunxin"):
        pr_names(["kunlunxin", "generic"])
    assert pr_names(None) == list(export.PRS)


# --- what the pages say of the code ---------------------------------------------------


def test_no_stale_claims():
    body = all_text()
    for stale in (
        "_prs()",
        "the only package that patches",
        "the one way to write",
        "(what CI runs)",
        "the launch-cache PR's call-site\npatches",
    ):
        assert stale not in body, stale


def _harness_files_matching(pattern: str, skip: tuple[str, ...]) -> set[str]:
    out = set()
    for path in HARNESS.rglob("*.py"):
        rel = str(path.relative_to(HARNESS))
        if not rel.startswith(skip) and re.search(pattern, path.read_text()):
            out.add(rel)
    return out


def test_every_patcher_outside_the_emulation_is_named():
    patchers = _harness_files_matching(
        r"mock\.patch\.object\(|\bsetattr\(", ("emulation/",)
    )
    assert patchers
    harness_md = text("docs/HARNESS.md")
    missing = sorted(p for p in patchers if f"`{p}`" not in harness_md)
    assert not missing, f"docs/HARNESS.md does not name these patchers: {missing}"


def test_the_one_writer_is_named():
    """No harness file writes JSON but through records.write (test_records holds that
    too), and HARNESS.md says so rather than naming other writers."""
    writers = _harness_files_matching(
        r"write_text\(\s*json\.dumps|json\.dump\(", ("records.py",)
    )
    assert not writers
    assert "`copyfix.records.write`" in text("docs/HARNESS.md")


def test_what_ci_runs():
    """The workflow's matrix as the pages' table has it; ``.ci/run`` as they say."""
    workflow = yaml.safe_load(WORKFLOW.read_text())
    entries = workflow["jobs"]["test"]["strategy"]["matrix"]["include"]
    page = text("docs/MAINTAINERS.md")
    rows = {
        m.group(1): m.group(3)
        for m in re.finditer(r"^\| `([\w-]+)` \| ([^|]+) \| `(.+)` \|$", page, re.M)
    }
    assert set(rows) == {e["name"] for e in entries}
    for e in entries:
        assert " ".join(rows[e["name"]].split()) == " ".join(e["run"].split()), e[
            "name"
        ]
    ci_run = (REPO / ".ci" / "run").read_text()
    said = re.search(r"`\.ci/run` is .*?(?=\n\n)", page, re.S).group(0)
    calls = ".ci/run" in WORKFLOW.read_text()
    assert calls == ("the workflow does not call it" not in " ".join(said.split()))
    for target in re.findall(r"^\s*make ([\w-]+)", ci_run, re.M):
        assert re.search(rf"`make {target}[` ]", said), f".ci/run runs make {target}"
    versions = re.search(r"for version in ([\d. ]+);", ci_run).group(1).split()
    assert versions
    for version in versions:
        assert f"`{version}`" in said, version
