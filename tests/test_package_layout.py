"""The bundle's Python is one package, src/torchrl_skill (CONTRIBUTING.md, "Layout"):

- the scripts the skill text names (scripts/*.py, sub-skills/*/scripts/*.py) are thin entry
  points: one ``sys.path.insert`` of ``<bundle>/src``, the import of their body's ``main``, and
  nothing else of the bundle; no private module is left beside them, so no folder of the bundle
  other than ``src/`` (which holds only ``torchrl_skill``) is ever on a user's ``sys.path``;
- no package module puts a bundle folder on ``sys.path``: the few that touch it do so for the
  user's folders; a child interpreter the package starts finds ``src/`` through the code
  runtime/boot.py writes for it;
- each data file has one path, in torchrl_skill/data, which every reader uses.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from conftest import BUNDLE, SCRIPTS

from torchrl_skill.report import skill_report

SRC = BUNDLE / "src"
ENTRY_POINTS = [*SCRIPTS, BUNDLE / "scripts" / "skill_report.py"]
# Package modules that change sys.path, and why (none of them to find the bundle's own code,
# except boot.py, the one place a child interpreter of the package is told where src/ is).
SYS_PATH_WRITERS = {
    "torchrl_skill/runtime/user_code.py": "a user's target folder (and its shim folder), as python puts a script's folder",
    "torchrl_skill/runtime/fork.py": "the sys.path `python ARGS` would have, in a forked process",
    "torchrl_skill/audit/child.py": "the audited script's folder first, as `python train.py` does",
    "torchrl_skill/checks/llm/smoke_render.py": "the temporary project folder of a rendered checkpoint",
}
DATA_FILES = ("error_index.json", "error_index.schema.json", "api_changes.json", "stack_lines.json", "upstream_index.json", "report.schema.json")


def _sys_path_writes(tree: ast.AST) -> list[int]:
    """Lines that change ``sys.path``: a call of its insert/append/extend/remove, or an
    assignment to it or to a slice of it."""
    lines = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and ast.unparse(node.func.value) == "sys.path"
                and node.func.attr in ("insert", "append", "extend", "remove", "pop", "clear")):
            lines.append(node.lineno)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            if any(ast.unparse(t).startswith("sys.path") for t in targets):
                lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=lambda p: p.relative_to(BUNDLE).as_posix())
def test_an_entry_point_finds_the_package_once_and_imports_its_main(entry: Path):
    tree = ast.parse(entry.read_text())
    assert ast.get_docstring(tree), "an entry point opens with a docstring"
    writes = _sys_path_writes(tree)
    assert len(writes) == 1, f"sys.path changed on lines {writes}: exactly one insert of <bundle>/src"
    insert = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n, "lineno", 0) == writes[0])
    assert ast.unparse(insert).startswith("sys.path.insert(0, ") and "'src'" in ast.unparse(insert), ast.unparse(insert)
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module)
    outside = {m for m in imported if m.split(".")[0] not in ("torchrl_skill", "sys", "pathlib", "signal")}
    assert not outside, f"an entry point imports only the package (and sys/pathlib): {outside}"
    module = skill_report.entry_module(entry)
    assert (SRC / (module.replace(".", "/") + ".py")).is_file(), module
    # its JSON report names the entry point, not the package file
    assert skill_report.entry_point_of(SRC / (module.replace(".", "/") + ".py")) == entry


def test_no_private_module_is_left_beside_the_entry_points():
    folders = [BUNDLE / "scripts", *sorted((BUNDLE / "sub-skills").glob("*/scripts"))]
    left = [p.relative_to(BUNDLE).as_posix() for f in folders for p in f.iterdir()
            if p.name != "__pycache__" and p not in ENTRY_POINTS]
    assert left == [], "only entry points live under scripts/: the rest belongs in src/torchrl_skill"


def test_no_package_module_puts_a_bundle_folder_on_sys_path():
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        lines = _sys_path_writes(ast.parse(path.read_text()))
        if lines and rel not in SYS_PATH_WRITERS:
            found[rel] = lines
    assert found == {}, f"package modules that change sys.path (only {sorted(SYS_PATH_WRITERS)} may, for the user's folders)"
    for rel in SYS_PATH_WRITERS:  # the list stays true: each one still writes sys.path
        assert _sys_path_writes(ast.parse((SRC / rel).read_text())), f"{rel} no longer changes sys.path: drop it from the list"
    boot = (SRC / "torchrl_skill" / "runtime" / "boot.py").read_text()
    others = [p.relative_to(SRC).as_posix() for p in SRC.rglob("*.py")
              if p.name != "boot.py" and ("parents[2]" in p.read_text() and '"src"' in p.read_text())]
    assert "SRC" in boot and others == []


def _string_constants(tree: ast.AST) -> list[ast.Constant]:
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


def test_each_data_file_is_found_through_its_one_path():
    """A data file's name is written as a path only in torchrl_skill/data: every reader in the
    bundle takes ``data.ERROR_INDEX`` (...) from there. (Benchmarks and tests that read a
    snapshot of the bundle at another root still spell the file's name.)"""
    data_module = SRC / "torchrl_skill" / "data" / "__init__.py"
    roots = [SRC, BUNDLE / "scripts", BUNDLE / "sub-skills"]
    offenders = []
    for path in sorted(p for root in roots for p in root.rglob("*.py")):
        if path == data_module or "fixtures" in path.parts or path == Path(__file__).resolve():
            continue
        for const in _string_constants(ast.parse(path.read_text())):
            if const.value in DATA_FILES:
                offenders.append(f"{path.relative_to(BUNDLE)}:{const.lineno}: {const.value!r}")
    assert offenders == [], offenders
    from torchrl_skill import data

    assert sorted(p.name for p in data.DATA.glob("*.json")) == sorted(DATA_FILES)
    for name in DATA_FILES:
        assert (data.DATA / name).is_file()


# data file -> the one module whose function reads it (the rest call that function)
LOADERS = {
    "ERROR_INDEX": "torchrl_skill/explain/error_index.py",          # load(), by_id(), generic_messages()
    "ERROR_INDEX_SCHEMA": "torchrl_skill/explain/error_index.py",   # _entry_validator()
    "API_CHANGES": "torchrl_skill/data/__init__.py",                # data.api_changes()
    "STACK_LINES": "torchrl_skill/stack/probe.py",                  # stack_lines()
    "UPSTREAM_INDEX": "torchrl_skill/stack/versions.py",            # upstream()
    "REPORT_SCHEMA": None,                                          # read by tests (jsonschema) only
}


def data_readers(files: dict[str, str]) -> dict[str, set[str]]:
    """``{data constant: modules that read it}`` for ``{module path: source}``: a read
    (``json.load``/``json.loads``/``read_text``/``open``/``_json``) whose argument names a data
    path (``data.X``, or a module constant bound to it such as ``INDEX_PATH = data.ERROR_INDEX``)."""
    readers: dict[str, set[str]] = {name: set() for name in LOADERS}
    for rel, source in files.items():
        tree = ast.parse(source)
        aliases = {f"data.{name}": name for name in LOADERS}
        for node in tree.body:
            if isinstance(node, ast.Assign) and ast.unparse(node.value) in aliases:
                aliases.update({t.id: aliases[ast.unparse(node.value)] for t in node.targets if isinstance(t, ast.Name)})
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = ast.unparse(node.func)
            if func.endswith(("json.loads", "json.load", "read_text", "_json")) or func == "open":
                text = ast.unparse(node)
                for alias, name in aliases.items():
                    if re.search(rf"(?<![\w.]){re.escape(alias)}(?!\w)", text):
                        readers[name].add(rel)
    return readers


def test_each_data_file_is_read_by_its_one_loader():
    """Each data file is read in its loader's module only; every other module calls the
    loader (whose path parameter defaults to the data constant)."""
    files = {p.relative_to(SRC).as_posix(): p.read_text() for p in sorted(SRC.rglob("*.py"))}
    readers = data_readers(files)
    wrong = {name: found - {LOADERS[name]} for name, found in readers.items() if found - {LOADERS[name]}}
    assert wrong == {}, f"read outside their loader: {wrong}"
    assert readers["STACK_LINES"] == {LOADERS["STACK_LINES"]}  # the scan sees a real read
    # negative control: a module reading the rename table itself is named
    planted = {"torchrl_skill/checks/x.py": "import json\nfrom torchrl_skill import data\n"
                                           "TABLE = data.API_CHANGES\nrows = json.loads(TABLE.read_text())\n"}
    assert data_readers(planted)["API_CHANGES"] == {"torchrl_skill/checks/x.py"}


def test_one_import_hook_and_one_thread_pin():
    """``sys.meta_path`` is changed only by runtime/import_hook.py and torch's thread count only
    by runtime/threads.py: the auditor's child and workers, and the LLM checks, share them."""
    owners = {"sys.meta_path": set(), "set_num_threads": set()}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                call = ast.unparse(node.func)
                if call.startswith("sys.meta_path."):
                    owners["sys.meta_path"].add(path.relative_to(SRC).as_posix())
                if node.func.attr == "set_num_threads":
                    owners["set_num_threads"].add(path.relative_to(SRC).as_posix())
    assert owners == {"sys.meta_path": {"torchrl_skill/runtime/import_hook.py"},
                      "set_num_threads": {"torchrl_skill/runtime/threads.py"}}, owners
