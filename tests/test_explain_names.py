"""scripts/explain.py finds every public name of every public torchrl and tensordict
module (src/torchrl_skill/explain/index.py): the index read from source equals
what the imported modules hold, every ``module.name`` and every short name resolves
(or says which optional dependency its module needs), and each distinct object is
explained with a signature. Ground truth here comes from importing the modules and
parsing them with ``ast``; the index itself never imports.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import warnings

import pytest
from conftest import BUNDLE, load_module, rows, run_main, run_python

from torchrl_skill.explain import index
from torchrl_skill.explain import names as en

from torchrl_skill.report import skill_report as sr  # noqa: E402

explain = load_module("scripts/explain")
VERSIONS = sr.stack_versions()
MODULES = [m for top in index.TOPS for m in index.walk(top)]


def _imported(module: str):
    """The imported module, or the ImportError it raises here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return importlib.import_module(module)
        except ImportError as err:
            return err


def _bound_at_column_0(module: str) -> set[str]:
    """Public names a module without ``__all__`` binds at top level (class, def, assignment), by ``ast``."""
    tree = ast.parse(index.module_file(module).read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if not n.startswith("_")}


def test_the_walk_is_every_public_module_and_pkgutil_agrees():
    """The file walk lists what ``pkgutil.walk_packages`` finds (imports packages), less private parts."""
    import pkgutil

    import tensordict
    import torchrl

    seen = set()
    for pkg in (torchrl, tensordict):
        seen.add(pkg.__name__)
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".", onerror=lambda _: None):
            if not any(part.startswith("_") for part in info.name.split(".")[1:]):
                seen.add(info.name)
    # pkgutil does not enter a package that fails to import (the hydra configs); the walk reads files
    unvisited = {m for m in set(MODULES) - seen if isinstance(_imported(m.rpartition(".")[0]), ImportError)}
    assert set(MODULES) - unvisited == seen, (sorted(set(MODULES) - seen)[:10], sorted(seen - set(MODULES))[:10])
    for wanted in ("torchrl.collectors.distributed", "torchrl.envs.libs.gym", "torchrl.trainers.algorithms.configs",
                   "torchrl.envs.llm", "torchrl.modules.llm.policies", "tensordict.nn.distributions"):
        assert wanted in MODULES


def test_index_read_from_source_equals_the_modules():
    """A module with ``__all__``: its names are the imported ``__all__`` (every module that imports
    here); without: the names ``ast`` sees bound at top level."""
    wrong, declared = [], 0
    for module in MODULES:
        names = list(index.static_all(module))
        if index.declares_all(module):
            declared += 1
            mod = _imported(module)
            if not isinstance(mod, ImportError) and names != list(dict.fromkeys(mod.__all__)):
                wrong.append(f"{module}: {set(names) ^ set(mod.__all__)}")
        elif set(names) != _bound_at_column_0(module):
            wrong.append(f"{module}: {set(names) ^ _bound_at_column_0(module)}")
    assert declared > 100 and wrong == [], wrong[:10]


def test_reading_the_index_imports_nothing():
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from torchrl_skill.explain import index; "
            "n = len(index.full_index()); bad = [m for m in ('torch', 'torchrl', 'tensordict') if m in sys.modules]; "
            "print(n, bad)")
    proc = run_python(["-c", code, str(BUNDLE / "src")], timeout=300)
    count, bad = proc.stdout.split(" ", 1)
    assert proc.returncode == 0 and int(count) > 1400 and bad.strip() == "[]", proc.stderr[-800:]


@pytest.mark.slow
def test_every_public_name_of_every_module_resolves_and_explains(capsys):
    """Every ``module.name`` of every public module: resolved to the very object the imported
    module holds; its module needing an absent optional dependency is "needs X" (never "not
    in torchrl"); each distinct object explained with a signature and no unmeasured fact."""
    problems, needs, distinct, undefined = [], set(), {}, []
    for dotted in index.public_names():
        module, _, name = dotted.rpartition(".")
        mod = _imported(module)
        hit = en.resolve(dotted)
        if isinstance(mod, ImportError):
            if not (isinstance(hit, en.NeedsBackend) and not hit.installed and importlib.util.find_spec(hit.missing) is None):
                problems.append(f"{dotted}: {hit}")
            needs.add(f"{module} needs {hit.missing}")
        elif not hasattr(mod, name):  # the library's own __all__ names what it does not define
            undefined.append(dotted)
            if isinstance(hit, en.Found) or "does not define it" not in _reason(name):
                problems.append(f"{dotted}: listed but undefined, explain says {hit}")
        elif not (isinstance(hit, en.Found) and hit.obj is _member(mod, name)):
            problems.append(f"{dotted}: {hit}")
        else:
            distinct.setdefault(id(hit.obj), dotted)
    for dotted in distinct.values():
        try:
            found, out = explain.explain_lines(dotted, VERSIONS)
        except Exception as err:  # a crash is what this test exists to catch
            problems.append(f"{dotted}: {type(err).__name__}: {err}")
            continue
        text = "\n".join(out)
        if not found or "  signature: " not in text or "facts not measured" in text:
            problems.append(f"{dotted}: {out[:3]}")
    with capsys.disabled():
        print(f"\nexplain: {len(index.public_names())} public module.name pairs over {len(MODULES)} modules; "
              f"{len(distinct)} distinct objects explained; needs an absent dependency: {sorted(needs)}; "
              f"listed in __all__ but undefined by the library: {undefined}")
    assert len(distinct) > 900 and problems == [], problems[:20]  # 1335 on torchrl 0.14.1, 984 on 0.11.1 (version matrix)


def _member(mod, name):
    return en.inspect_getattr(mod, name)


def _reason(name: str) -> str:
    hit = en.resolve(name)
    return getattr(hit, "reason", "")


def test_every_short_name_resolves():
    """A short name (``RayCollector``, ``terminal_obs_reader``) is found in whichever public module holds it."""
    lost = []
    for name, modules in index.full_index().items():
        hit = en.resolve(name)
        held = [m for m in modules if not isinstance(_imported(m), ImportError) and hasattr(_imported(m), name)]
        if held and not (isinstance(hit, en.Found) and hit.obj is getattr(_imported(held[0]), name)):
            lost.append(f"{name}: {hit}")
    assert lost == [], lost[:20]


@pytest.mark.slow
def test_raycollector_is_found_from_a_fresh_cli():
    """The command scaling-with-ray.md gives: exit 0, the import line, Ray's own module."""
    proc = run_python([str(BUNDLE / "scripts" / "explain.py"), "RayCollector", "--json"], timeout=300)
    import json

    report = json.loads(proc.stdout)
    status, detail = rows(report)["explain:RayCollector"]
    assert proc.returncode == 0 and status == "pass", detail
    assert "from torchrl.collectors.distributed import RayCollector" in detail and "signature: RayCollector(" in detail
    assert "ray installed" in detail  # explaining a Ray class does not hide Ray from its own facts


def test_a_name_whose_module_needs_an_absent_dependency_is_missing_not_absent():
    """torchrl.trainers.algorithms.configs imports hydra (torchrl 0.14.1): a MISSING row that
    names hydra-core, exit 0; a name no module has stays a failure (exit 1)."""
    assert importlib.util.find_spec("hydra") is None  # this test is about an absent backend
    code, report = run_main("scripts/explain", "PPOTrainerConfig")
    status, detail = rows(report)["explain:PPOTrainerConfig"]
    assert code == 0 and status == "missing", detail
    assert "torchrl.trainers.algorithms.configs" in detail and "pip install hydra-core" in detail and "not in torchrl" not in detail
    code, report = run_main("scripts/explain", "NoSuchThingXyz")
    assert code == 1 and rows(report)["explain:NoSuchThingXyz"][0] == "fail"
    hit = en.resolve("torchrl.trainers.algorithms.configs.PPOTrainerConfig")
    assert isinstance(hit, en.NeedsBackend) and hit.missing == "hydra" and not hit.installed
