"""Checks behind the docs contract tests (tests/README.md says what each enforces).

Every ``check_*`` function takes a path (or text) and returns a list of problem strings:
empty means the file keeps the rule. The contract tests run them over the bundle and
require empty lists; the negative-control tests run them over broken fixtures and require
the problem to be named.

Why one file of ~850 lines: it is the docs contract, one section per rule (files,
markdown, names, blocks, links, sizes, commands, README table, troubleshooting, proofs),
and the contract tests and negative controls must run the very same functions.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import functools
import importlib
import inspect
import json
import keyword
import pkgutil
import re
import subprocess
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import yaml
from conftest import BUNDLE, load_module, run_python
from torchrl_skill import data
from markdown_it import MarkdownIt

API_CHANGES = data.API_CHANGES
VOCAB_EXTRA = BUNDLE / "tests" / "data" / "vocabulary_extra.txt"
BLOCK_RUNNER = BUNDLE / "tests" / "run_md_blocks.py"
MAX_NOT_RUN_PER_FILE = 4
ROOT_MAX_LINES, ROOT_MAX_TOKENS = 150, 1500
SKILL_MAX_LINES, SKILL_MAX_TOKENS = 200, 5000
ROUTE_MAX_TOKENS = 5000  # root SKILL.md + one sub-skill's SKILL.md + one of its references
AGENT_MAX_TOKENS = 80_000  # every SKILL.md and reference together (agent_markdown())
# A python block's time limit is a hang guard, not a budget: ~30 s blocks must still pass
# on a machine 3x slower with both cores busy (CONTRIBUTING.md, "Tests").
BLOCK_TIMEOUT_S = 180
FILE_TIMEOUT_S = 590  # under pytest's --timeout=600, so a hang reports which file
TOC_THRESHOLD = 100
OTHER_LIBRARIES = [
    "torch", "torch.nn", "torch.distributions", "torch.optim", "torch.utils.data", "torch.multiprocessing",
    "gymnasium", "gymnasium.vector", "gymnasium.wrappers", "transformers", "tokenizers", "datasets",
    "trl", "ray", "numpy", "multiprocessing",
]
SPAN_RE = re.compile(r"^[A-Za-z_][\w.]*(\(.*\))?$", re.S)
# `python $SKILL_DIR/scripts/x.py --flag`: $SKILL_DIR is the bundle root (the root SKILL.md says so).
COMMAND_RE = re.compile(r"\bpython3?\s+(?:-\S+\s+)*((?:\"?\$SKILL_DIR\"?/)?)([\w./-]+\.py)((?:[ \t]+[^\s|;&#]+)*)")
MARKER_RE = re.compile(r"^<!--\s*(not-run|raises):\s*(.*?)\s*-->$")
PROOF_RE = re.compile(r"<!--\s*proof:\s*(.*?)\s*-->", re.S)
NO_CLAIMS_RE = re.compile(r"<!--\s*no-claims\s*-->")
GENERATED_RE = re.compile(r"<!-- BEGIN GENERATED.*?<!-- END GENERATED -->", re.S)


# ----------------------------------------------------------------------------- files
def bundle_markdown(root: Path = BUNDLE) -> list[Path]:
    """Every markdown file an agent or user reads: SKILL.md files, references, README."""
    files = [root / "SKILL.md", root / "README.md"]
    files += sorted((root / "references").rglob("*.md"))
    files += sorted((root / "sub-skills").rglob("*.md"))
    return [f for f in files if f.exists()]


def skill_dirs(root: Path = BUNDLE) -> list[Path]:
    return [root] + sorted(p.parent for p in (root / "sub-skills").glob("*/SKILL.md"))


def nearest_skill_dir(md: Path, root: Path = BUNDLE) -> Path:
    for parent in [md.parent, *md.parents]:
        if (parent / "SKILL.md").exists():
            return parent
        if parent == root:
            break
    return root


# ----------------------------------------------------------------------------- markdown
@dataclass
class Fence:
    lang: str
    code: str
    line: int  # 1-based line of the opening fence
    marker: tuple[str, str] | None  # ("not-run", reason) | ("raises", text) | None


@functools.lru_cache(maxsize=None)
def _tokens(text: str):
    return MarkdownIt("commonmark").parse(text)


def fences(text: str) -> list[Fence]:
    lines = text.splitlines()
    out = []
    for tok in _tokens(text):
        if tok.type != "fence":
            continue
        start = tok.map[0]
        marker = None
        above = start - 1
        while above >= 0 and not lines[above].strip():
            above -= 1
        if above >= 0:
            m = MARKER_RE.match(lines[above].strip())
            if m:
                marker = (m.group(1), m.group(2))
        out.append(Fence(tok.info.strip().split(" ")[0].lower(), tok.content, start + 1, marker))
    return out


def inline_code(text: str) -> list[tuple[str, int]]:
    """(span, line) for every inline code span."""
    out = []
    for tok in _tokens(text):
        if tok.type == "inline" and tok.children:
            for child in tok.children:
                if child.type == "code_inline":
                    out.append((child.content, tok.map[0] + 1))
    return out


def links(text: str) -> list[tuple[str, int, str]]:
    """(href, line, the whole source line) for every link and image."""
    lines = text.splitlines()
    out = []
    for tok in _tokens(text):
        if tok.type == "inline" and tok.children:
            for child in tok.children:
                href = child.attrGet("href") if child.type == "link_open" else child.attrGet("src") if child.type == "image" else None
                if href is not None:
                    line = tok.map[0] + 1
                    # a paragraph may span lines; find the source line holding the href
                    for i in range(tok.map[0], tok.map[1]):
                        if href in lines[i]:
                            line = i + 1
                            break
                    out.append((href, line, lines[line - 1]))
    return out


def frontmatter(text: str) -> dict | None:
    m = re.match(r"^---\n(.*?)\n---\n", text, re.S)
    return yaml.safe_load(m.group(1)) if m else None


# ----------------------------------------------------------------------------- the installed API
@functools.lru_cache(maxsize=None)
def api_modules() -> tuple:
    """Every importable public torchrl and tensordict module (torchrl 0.14.1: ~370)."""
    import tensordict
    import torchrl

    mods = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for pkg in (torchrl, tensordict):
            mods.append(pkg)
            for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
                if any(part.startswith("_") for part in info.name.split(".")[1:]):
                    continue
                try:
                    mods.append(importlib.import_module(info.name))
                except BaseException:  # optional backends absent: skip that module
                    continue
    return tuple(mods)


@functools.lru_cache(maxsize=None)
def api_source_text() -> str:
    """All torchrl and tensordict Python source, concatenated (for env var / constant names)."""
    import tensordict
    import torchrl

    chunks = []
    for pkg in (torchrl, tensordict):
        for path in Path(pkg.__file__).parent.rglob("*.py"):
            chunks.append(path.read_text(errors="ignore"))
    return "\n".join(chunks)


def _is_api_object(obj) -> bool:
    mod = getattr(obj, "__module__", "") or ""
    return mod.startswith(("torchrl", "tensordict"))


@functools.lru_cache(maxsize=None)
def api_names() -> dict:
    """Public name -> object, for every name defined in or re-exported by the API modules."""
    names: dict = {}
    for mod in api_modules():
        for name, obj in vars(mod).items():
            if not name.startswith("_") and name not in names:
                names[name] = obj
    return names


def _string_leaves(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (tuple, list)):
        return [s for v in value for s in _string_leaves(v)]
    return []


@functools.lru_cache(maxsize=None)
def vocabulary() -> frozenset:
    """Snake_case words the API defines: names, parameter names, attributes, string
    defaults, loss ``_AcceptedKeys`` fields and defaults, and identifier-like string
    literals of the installed source."""
    words: set[str] = set()
    seen: set[int] = set()
    for name, obj in api_names().items():
        words.add(name)
        if id(obj) in seen or not _is_api_object(obj):
            continue
        seen.add(id(obj))
        targets = [obj]
        if inspect.isclass(obj):
            words.update(n for n in dir(obj) if not n.startswith("__"))
            for raw in vars(obj).values():  # raw descriptors: getattr could run class properties
                raw = getattr(raw, "__func__", None) or getattr(raw, "fget", None) or raw
                targets.append(raw)
            accepted = getattr(obj, "_AcceptedKeys", None)
            if accepted is not None and dataclasses.is_dataclass(accepted):
                for f in dataclasses.fields(accepted):
                    words.add(f.name)
                    words.update(_string_leaves(f.default))
        for target in targets:
            if not callable(target):
                continue
            try:
                sig = inspect.signature(target)
            except (TypeError, ValueError):
                continue
            for p in sig.parameters.values():
                words.add(p.name)
                words.update(_string_leaves(p.default))
    # keys and attribute names the source uses as string literals ("episode_reward",
    # getattr(env, "autoreset_mode")) exist in the installed version too
    words.update(re.findall(r"""["']([A-Za-z_][A-Za-z0-9_]*)["']""", api_source_text()))
    for line in VOCAB_EXTRA.read_text().splitlines():
        word = line.split("#")[0].strip()
        if word:
            words.add(word)
    return frozenset(words)


@functools.lru_cache(maxsize=None)
def api_changes() -> dict:
    return json.loads(API_CHANGES.read_text())


@functools.lru_cache(maxsize=None)
def removed_names() -> frozenset:
    rows = api_changes().get("names", [])
    return frozenset(r["old"].rsplit(".", 1)[-1] for r in rows) | frozenset(r["old"] for r in rows)


# One resolver for dotted names, the bundle's own (scan_api_drift.py uses it too).
from torchrl_skill.checks.development import api_table  # noqa: E402


@functools.lru_cache(maxsize=None)
def other_library_object(name: str):
    """``name`` (maybe dotted) in one of OTHER_LIBRARIES or builtins, else None."""
    head, *rest = name.split(".")
    candidates = [getattr(builtins, head, None)]
    for lib in OTHER_LIBRARIES:
        try:
            mod = importlib.import_module(lib)
        except ImportError:
            continue
        candidates.append(getattr(mod, head, None))
    for obj in candidates:
        if obj is None:
            continue
        try:
            for attr in rest:
                obj = getattr(obj, attr)
            return obj
        except AttributeError:
            continue
    return None


@functools.lru_cache(maxsize=None)
def bundle_script_names() -> frozenset:
    """Module-level functions and classes the bundle's own scripts define (docs may name
    them: ``compute_metrics`` in a script is as real as a torchrl name)."""
    names: set[str] = set()
    for path in sorted((BUNDLE / "src").rglob("*.py")):
        try:
            tree = ast.parse(path.read_text())
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.add(node.name)
                if isinstance(node, ast.ClassDef):
                    names.update(f"{node.name}.{n.name}" for n in node.body if isinstance(n, ast.FunctionDef))
    return frozenset(names)


def signature_problem(obj, keywords: list[str], where: str) -> str | None:
    """A problem string when ``obj``'s signature rejects one of ``keywords``."""
    if not callable(obj) or not keywords:
        return None
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    params = sig.parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    bad = [k for k in keywords if k not in params]
    if bad:
        return f"{where}: {getattr(obj, '__qualname__', obj)} does not accept keyword(s) {bad}"
    return None


# ----------------------------------------------------------------------------- names in inline code
def check_span(span: str, where: str) -> list[str]:
    """Check one inline code span (see tests/README.md, 'Names in inline code')."""
    span = span.strip()
    if not SPAN_RE.match(span) or " " in span.split("(")[0]:
        return []
    head = span.split("(")[0].rstrip(".")
    if re.search(r"\.(md|py|json|txt|toml|yaml|yml|so|cfg|ini|csv|npz|mp4|png|jsonl)$", head):
        return []  # a file name, checked by the link and command checks
    if head in ("None", "True", "False") or keyword.iskeyword(head):
        return []
    if re.fullmatch(r"[A-Z][A-Z0-9_]*", head):
        # an environment variable or constant: it must occur in the installed source
        if "_" in head and head not in api_source_text():
            return [f"{where}: `{head}` does not occur in the installed torchrl/tensordict source"]
        return []
    keywords: list[str] = []
    if "(" in span:
        try:
            node = ast.parse(span, mode="eval").body
        except SyntaxError:
            node = None
        if isinstance(node, ast.Call):
            keywords = [k.arg for k in node.keywords if k.arg]
    parts = head.split(".")
    first = parts[0]
    if first in removed_names() or head in removed_names() or head in bundle_script_names():
        return []  # api_changes.json rows are verified absent by test_api_change_rows_hold
    if first in ("torchrl", "tensordict"):
        if not api_table.exists(head):
            return [f"{where}: `{head}` does not resolve in the installed {first}"]
        obj = api_table.resolve(head)
        problem = signature_problem(obj, keywords, where)
        return [problem] if problem else []
    if first[:1].isupper():
        obj = api_names().get(first)
        if obj is not None:
            try:
                for attr in parts[1:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                return [f"{where}: `{head}`: {first} has no attribute {'.'.join(parts[1:])}"]
        else:
            obj = other_library_object(head)
            if obj is None:
                return [f"{where}: `{head}` is not a public torchrl/tensordict name (nor a known library's)"]
        problem = signature_problem(obj, keywords, where)
        return [problem] if problem else []
    # lowercase head: a torchrl function, another library's module path, or a word
    # (parameter, attribute, method or key name) that the API must define
    if first in ("torch", "gymnasium", "transformers", "ray", "numpy", "np", "tokenizers", "datasets", "trl"):
        return []
    obj = api_names().get(first) if len(parts) == 1 else None
    if obj is not None and callable(obj):
        problem = signature_problem(obj, keywords, where)
        return [problem] if problem else []
    last = parts[-1]
    if "_" in last.strip("_") and last not in vocabulary():
        return [f"{where}: `{last}` is not a torchrl/tensordict parameter, attribute or key name "
                f"(nor in tests/data/vocabulary_extra.txt)"]
    return []


def check_inline_names(md: Path) -> list[str]:
    text = md.read_text()
    problems = []
    for span, line in inline_code(text):
        problems += check_span(span, f"{md.relative_to(BUNDLE) if md.is_relative_to(BUNDLE) else md}:{line}")
    return problems


# ----------------------------------------------------------------------------- python blocks, statically
def _bindings(tree: ast.AST, where: str, problems: list[str]) -> dict:
    bound: dict = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in ("torchrl", "tensordict"):
            for alias in node.names:
                if alias.name == "*":
                    continue
                try:
                    mod = importlib.import_module(node.module)
                    obj = getattr(mod, alias.name) if hasattr(mod, alias.name) else importlib.import_module(f"{node.module}.{alias.name}")
                except (ImportError, AttributeError):
                    problems.append(f"{where}+{node.lineno}: cannot import {alias.name} from {node.module}")
                    continue
                bound[alias.asname or alias.name] = obj
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in ("torchrl", "tensordict"):
                    try:
                        mod = importlib.import_module(alias.name)
                    except ImportError:
                        problems.append(f"{where}+{node.lineno}: cannot import {alias.name}")
                        continue
                    bound[alias.asname or alias.name.split(".")[0]] = mod if alias.asname else importlib.import_module(alias.name.split(".")[0])
    return bound


def _resolve_expr(node: ast.AST, bound: dict):
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _resolve_expr(node.value, bound)
        if base is not None and (inspect.ismodule(base) or inspect.isclass(base)):
            return getattr(base, node.attr, None)
    return None


def check_python_static(code: str, where: str) -> list[str]:
    """Imports from torchrl/tensordict resolve; their callables accept the keywords used."""
    try:
        tree = ast.parse(code)
    except SyntaxError as err:
        return [f"{where}: python block does not parse: {err.msg} (line {err.lineno})"]
    problems: list[str] = []
    bound = _bindings(tree, where, problems)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) and node.func.value.id in bound:
                base = bound[node.func.value.id]
                if (inspect.ismodule(base) or inspect.isclass(base)) and not hasattr(base, node.func.attr):
                    problems.append(f"{where}+{node.lineno}: {node.func.value.id}.{node.func.attr} does not exist")
                    continue
            obj = _resolve_expr(node.func, bound)
            if obj is not None:
                kws = [k.arg for k in node.keywords if k.arg]
                problem = signature_problem(obj, kws, f"{where}+{node.lineno}")
                if problem:
                    problems.append(problem)
    return problems


def check_code_blocks_static(md: Path) -> list[str]:
    problems = []
    rel = md.relative_to(BUNDLE) if md.is_relative_to(BUNDLE) else md
    for f in fences(md.read_text()):
        # a `raises:` block is wrong on purpose (an old import, a bad keyword); running
        # it and matching the error text is its check
        if f.lang in ("python", "py") and not (f.marker and f.marker[0] == "raises"):
            problems += check_python_static(f.code, f"{rel}:{f.line}")
    return problems


def check_markers(md: Path) -> list[str]:
    """not-run markers are capped; raises markers say what they expect."""
    fs = [f for f in fences(md.read_text()) if f.lang in ("python", "py")]
    not_run = [f for f in fs if f.marker and f.marker[0] == "not-run"]
    problems = []
    if len(not_run) > MAX_NOT_RUN_PER_FILE:
        problems.append(f"{md.name}: {len(not_run)} not-run python blocks (max {MAX_NOT_RUN_PER_FILE})")
    for f in fs:
        if f.marker and not f.marker[1]:
            problems.append(f"{md.name}:{f.line}: `{f.marker[0]}:` marker without a reason/expected text")
    return problems


def runnable_blocks(md: Path) -> list[dict]:
    """The python blocks the execution test runs: code, line, expected exception text."""
    out = []
    for f in fences(md.read_text()):
        if f.lang not in ("python", "py") or (f.marker and f.marker[0] == "not-run"):
            continue
        out.append({"line": f.line, "code": f.code, "raises": f.marker[1] if f.marker and f.marker[0] == "raises" else None})
    return out


def run_blocks(md: Path, timeout_per_block: int = BLOCK_TIMEOUT_S) -> list[str]:
    """Execute the file's python blocks in one fresh process (tests/run_md_blocks.py), forked
    from an interpreter that imported torchrl already (conftest.run_python's ``warm``).

    ``timeout_per_block`` only stops a hung block; the whole file gets FILE_TIMEOUT_S."""
    blocks = runnable_blocks(md)
    if not blocks:
        return []
    with tempfile.TemporaryDirectory(prefix="torchrl-skill-blocks-") as tmp:
        listing = Path(tmp) / "blocks.json"
        listing.write_text(json.dumps(blocks))
        try:
            proc = run_python([str(BLOCK_RUNNER), "--timeout", str(timeout_per_block), "--blocks", str(listing)],
                              timeout=FILE_TIMEOUT_S, cwd=Path(tmp), warm=True)
        except subprocess.TimeoutExpired:
            return [f"{md.name}: its python blocks did not finish in {FILE_TIMEOUT_S} s together"]
    if proc.returncode not in (0, 1):
        return [f"{md.name}: block runner crashed (exit {proc.returncode}): {proc.stderr[-2000:]}"]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    return [f"{md.name}:{r['line']}: {r['problem']}" for r in results if r["problem"]]


# ----------------------------------------------------------------------------- links and routing
def heading_anchors(text: str) -> set[str]:
    """GitHub-style anchors of a markdown file's headings (lowercase, punctuation
    dropped, spaces to hyphens; repeats get -1, -2, ...)."""
    anchors: set[str] = set()
    lines = text.splitlines()
    for tok in _tokens(text):
        if tok.type == "heading_open":
            title = lines[tok.map[0]].lstrip("#").strip()
            # trailing hyphens (a heading ending in punctuation) are dropped on both sides
            slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-").rstrip("-")
            candidate, n = slug, 0
            while candidate in anchors:
                n += 1
                candidate = f"{slug}-{n}"
            anchors.add(candidate)
    return anchors


def check_links(md: Path, root: Path = BUNDLE) -> list[str]:
    problems = []
    for href, line, _ in links(md.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", href) and not href.startswith("file:"):
            continue  # https:, mailto:
        target, _, anchor = href.partition("#")
        if anchor:
            anchor_file = (md.parent / target) if target else md
            if anchor_file.suffix == ".md" and anchor_file.is_file() and anchor.rstrip("-") not in heading_anchors(anchor_file.read_text()):
                problems.append(f"{md.name}:{line}: no heading for anchor #{anchor} in {anchor_file.name}")
        if not target:
            continue
        if href.startswith(("file:", "/", "~")) or re.match(r"^[A-Za-z]:\\", href):
            problems.append(f"{md.name}:{line}: machine path link {href}")
            continue
        resolved = (md.parent / target).resolve()
        if not resolved.is_relative_to(root.resolve()):
            problems.append(f"{md.name}:{line}: link leaves the bundle: {href}")
        elif not resolved.exists():
            problems.append(f"{md.name}:{line}: broken link {href}")
    return problems


def check_references_linked(skill_dir: Path) -> list[str]:
    """Each references/*.md is linked from this SKILL.md on a line that says when to read it."""
    skill_md = skill_dir / "SKILL.md"
    text = skill_md.read_text()
    linked: dict = {}
    for href, _, source in links(text):
        linked.setdefault((skill_dir / href.split("#")[0]).resolve(), []).append(source)
    problems = []
    for ref in sorted((skill_dir / "references").glob("*.md")):
        sources = linked.get(ref.resolve())
        if sources is None:
            problems.append(f"{skill_md.relative_to(skill_dir.parent)}: does not link references/{ref.name}")
            continue

        def prose(source: str) -> str:
            without_links = re.sub(r"\[[^\]]*\]\([^)]*\)", "", source)
            return re.sub(r"[\s|*`:.\-]+", " ", without_links).strip()

        if max(len(prose(s)) for s in sources) < 15:
            problems.append(f"{skill_md.name}: the link to references/{ref.name} has no line saying when to read it")
    return problems


def check_root_routes(root: Path = BUNDLE) -> list[str]:
    text = (root / "SKILL.md").read_text()
    targets = {(root / h.split("#")[0]).resolve() for h, _, _ in links(text)}
    return [f"root SKILL.md does not route to sub-skills/{d.name}"
            for d in skill_dirs(root)[1:] if (d / "SKILL.md").resolve() not in targets]


def supported_stack(root: Path = BUNDLE) -> str:
    """The root SKILL.md's ``compatibility`` up to its first ``;``: the Python and torchrl
    range and the verified stack every sub-skill states the same way."""
    return str(frontmatter((root / "SKILL.md").read_text()).get("compatibility", "")).split(";")[0].strip()


def check_compatibility_agrees(skill_dir: Path, root: Path = BUNDLE) -> list[str]:
    """A sub-skill's ``compatibility`` opens with the root's supported stack (then its own
    extras after ``;``): the bundle states one range and one verified stack."""
    want = supported_stack(root)
    have = str((frontmatter((skill_dir / "SKILL.md").read_text()) or {}).get("compatibility", ""))
    if not want or have.split(";")[0].strip() != want:
        return [f"{skill_dir.name}/SKILL.md: compatibility {have.split(';')[0]!r} differs from the root's {want!r}"]
    return []


def check_scripts_named(skill_dir: Path, scripts: list[Path]) -> list[str]:
    text = (skill_dir / "SKILL.md").read_text()
    return [f"{skill_dir.name}/SKILL.md does not mention its script {s.name}" for s in scripts if s.name not in text]


# ----------------------------------------------------------------------------- sizes, frontmatter
def tokens(text: str) -> int:
    """The size measure of CONTRIBUTING.md "SKILL.md files": characters / 4."""
    return len(text) // 4


def check_size(md: Path, is_root: bool = False) -> list[str]:
    text = md.read_text()
    lines = len(text.splitlines())
    problems = []
    if md.name == "SKILL.md":
        line_cap = ROOT_MAX_LINES if is_root else SKILL_MAX_LINES
        token_cap = ROOT_MAX_TOKENS if is_root else SKILL_MAX_TOKENS
        if lines > line_cap:
            problems.append(f"{md}: {lines} lines (max {line_cap})")
        if tokens(text) > token_cap:
            problems.append(f"{md}: about {tokens(text)} tokens (max {token_cap})")
    elif lines > TOC_THRESHOLD:
        head = "\n".join(text.splitlines()[:20])
        if not re.search(r"^## Contents\s*$", head, re.M) or "](#" not in head:
            problems.append(f"{md.name}: {lines} lines and no '## Contents' list of section links near the top")
    return problems


def check_route_budget(skill_dir: Path, root: Path = BUNDLE) -> list[str]:
    """Every route through ``skill_dir`` fits ROUTE_MAX_TOKENS: the root SKILL.md, the
    sub-skill's SKILL.md (not counted twice for the root itself) and one of its references."""
    root_md = root / "SKILL.md"
    base = [root_md] if skill_dir.resolve() == root.resolve() else [root_md, skill_dir / "SKILL.md"]
    base_tokens = sum(tokens(f.read_text()) for f in base)
    problems = []
    for ref in sorted((skill_dir / "references").glob("*.md")):
        total = base_tokens + tokens(ref.read_text())
        if total > ROUTE_MAX_TOKENS:
            route = " + ".join(f.relative_to(root).as_posix() for f in [*base, ref])
            problems.append(f"route {route}: about {total} tokens (max {ROUTE_MAX_TOKENS})")
    return problems


def check_frontmatter(skill_dir: Path, name: str | None = None) -> list[str]:
    """skills-ref validation plus this bundle's metadata rules.

    ``name``: the folder name the skill is installed under (root: ``torchrl``).
    """
    import skills_ref

    text = (skill_dir / "SKILL.md").read_text()
    fm = frontmatter(text)
    if fm is None:
        return [f"{skill_dir.name}/SKILL.md: no YAML frontmatter"]
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        link = Path(tmp) / (name or skill_dir.name)
        link.symlink_to(skill_dir.resolve(), target_is_directory=True)
        problems += [f"{link.name}/SKILL.md: {e}" for e in skills_ref.validate(link)]
    meta = fm.get("metadata") or {}
    for key, want in (("disco-role", "operating"), ("torchrl-version", "0.14.1"), ("tensordict-version", "0.14.3")):
        if str(meta.get(key)) != want:
            problems.append(f"{skill_dir.name}/SKILL.md: metadata.{key} is {meta.get(key)!r}, expected {want!r}")
    if "disable-model-invocation" in fm:
        problems.append(f"{skill_dir.name}/SKILL.md: disable-model-invocation must not be set")
    desc = str(fm.get("description", ""))
    if re.search(r"[<>]", desc):
        problems.append(f"{skill_dir.name}/SKILL.md: description contains < or >")
    if not re.search(r"\b(use|when)\b", desc, re.I):
        problems.append(f"{skill_dir.name}/SKILL.md: description does not say when to use it")
    return problems


# ----------------------------------------------------------------------------- commands and flags
@functools.lru_cache(maxsize=None)
def script_help(path: Path) -> str:
    """The ``--help`` text of a bundled script, from its own ``build_parser()``.

    A script that fails to import or to build its parser raises here: a broken script
    must fail the docs test, not look like a script without the flag."""
    return load_module(path).build_parser().format_help()


def commands(md: Path) -> list[tuple[str, str, int, bool]]:
    """(script path, argument text, line, uses $SKILL_DIR) for each `python X.py ...` in
    bash blocks and inline code."""
    text = md.read_text()
    found = []
    for f in fences(text):
        if f.lang in ("bash", "sh", "shell", "console", ""):
            for i, line in enumerate(f.code.splitlines()):
                for m in COMMAND_RE.finditer(line):
                    found.append((m.group(2), m.group(3), f.line + 1 + i, bool(m.group(1))))
    for span, line in inline_code(text):
        for m in COMMAND_RE.finditer(span):
            found.append((m.group(2), m.group(3), line, bool(m.group(1))))
    return found


def _command_script(md: Path, script: str, uses_skill_dir: bool, root: Path = BUNDLE) -> Path | None:
    """The bundled script a command names: ``$SKILL_DIR/PATH`` is bundle-root relative;
    a bare PATH may also be relative to the nearest SKILL.md's folder or to the file."""
    candidates = [root / script] if uses_skill_dir else [root / script, nearest_skill_dir(md, root) / script, md.parent / script]
    return next((c for c in candidates if c.is_file()), None)


def check_commands(md: Path, root: Path = BUNDLE) -> list[str]:
    problems = []
    for script, argtext, line, uses_skill_dir in commands(md):
        path = _command_script(md, script, uses_skill_dir, root)
        where = f"{md.name}:{line}"
        if path is None:
            shown = f"$SKILL_DIR/{script}" if uses_skill_dir else script
            problems.append(f"{where}: `python {shown}` names no bundled script")
            continue
        help_text = script_help(path.resolve())
        for flag in re.findall(r"(?<![\w-])(--[A-Za-z][\w-]*)", argtext):
            if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text):
                problems.append(f"{where}: {script} has no flag {flag} in its --help")
    return problems


def check_skill_dir_commands(md: Path, root: Path = BUNDLE) -> list[str]:
    """A command naming a bundled script is written ``python $SKILL_DIR/<bundle path>``:
    an agent runs it from the user's project, not from the bundle (CONTRIBUTING.md,
    "SKILL.md files")."""
    problems = []
    for script, _, line, uses_skill_dir in commands(md):
        path = _command_script(md, script, uses_skill_dir, root)
        if path is not None and not uses_skill_dir:
            rel = path.resolve().relative_to(root.resolve()).as_posix()
            problems.append(f"{md.name}:{line}: write `python $SKILL_DIR/{rel}`, not `python {script}` "
                            "(the command runs from the user's project)")
    return problems


def agent_markdown(root: Path = BUNDLE) -> list[Path]:
    """What an agent reads and runs commands from: every SKILL.md and reference (the
    README is for people in a clone of the repository, whose commands run from its root)."""
    return [m for m in bundle_markdown(root) if m != root / "README.md"]


def check_agent_budget(root: Path = BUNDLE) -> list[str]:
    """All agent-facing markdown (``agent_markdown``) fits AGENT_MAX_TOKENS together: what an
    agent may load over a session, so a fact is written once and linked, not restated."""
    files = agent_markdown(root)
    total = sum(tokens(f.read_text()) for f in files)
    if total <= AGENT_MAX_TOKENS:
        return []
    largest = sorted(files, key=lambda f: -tokens(f.read_text()))[:5]
    return [f"agent markdown: about {total} tokens in {len(files)} files (max {AGENT_MAX_TOKENS}); largest: "
            + ", ".join(f"{f.relative_to(root).as_posix()} {tokens(f.read_text())}" for f in largest)]


# ----------------------------------------------------------------------------- README script table
SCRIPT_TABLE_BEGIN = "<!-- BEGIN GENERATED script table: each script's --help description; python tests/render_docs.py -->"
SCRIPT_TABLE_END = "<!-- END GENERATED -->"


def script_description(path: Path) -> str:
    """The first line of a script's ``--help`` description (its docstring's first paragraph)."""
    return " ".join((load_module(path).build_parser().description or "").split())


def render_script_table(root: Path = BUNDLE) -> str:
    """The README's generated block: one row per bundled script, in discovery order."""
    from torchrl_skill.report import skill_report

    rows = ["| Script | What it does |", "| --- | --- |"]
    for path in skill_report.discover_scripts(root):
        rel = path.relative_to(root).as_posix()
        cell = script_description(path).replace("|", r"\|")
        rows.append(f"| [`{rel}`]({rel}) | {cell} |")
    return "\n".join([SCRIPT_TABLE_BEGIN, "", *rows, "", SCRIPT_TABLE_END])


def replace_script_table(text: str, block: str) -> str:
    """``text`` with its generated script table replaced (ValueError when the marks are absent)."""
    start = text.index(SCRIPT_TABLE_BEGIN)
    end = text.index(SCRIPT_TABLE_END, start) + len(SCRIPT_TABLE_END)
    return text[:start] + block + text[end:]


def check_script_table(readme: Path, root: Path = BUNDLE) -> list[str]:
    """The README's script table equals what the scripts' own --help says now."""
    text = readme.read_text()
    if SCRIPT_TABLE_BEGIN not in text:
        return [f"{readme.name}: no generated script table ({SCRIPT_TABLE_BEGIN})"]
    if replace_script_table(text, render_script_table(root)) != text:
        return [f"{readme.name}: the script table is stale: regenerate it (python tests/render_docs.py)"]
    return []


# ----------------------------------------------------------------------------- troubleshooting
def check_troubleshooting(md: Path) -> list[str]:
    problems = []
    sections = re.split(r"^### ", md.read_text(), flags=re.M)[1:]
    if not sections:
        problems.append(f"{md.name}: no '### ' entries")
    for sec in sections:
        title = sec.splitlines()[0].strip()
        body = re.split(r"^#{1,3} ", sec, flags=re.M)[0]
        for label in ("Cause:", "Fix:", "Verify:", "Versions:"):
            if label not in body:
                problems.append(f"{md.name}: entry '{title[:60]}' lacks '{label}'")
    return problems


# ----------------------------------------------------------------------------- proofs
def reference_files(root: Path = BUNDLE) -> list[Path]:
    """The references whose sections must prove themselves: ``references/*.md`` and
    ``sub-skills/*/references/*.md``."""
    return sorted((root / "references").glob("*.md")) + sorted((root / "sub-skills").glob("*/references/*.md"))


@dataclass
class Section:
    title: str
    line: int  # 1-based line of the ``## `` heading
    text: str  # the section's source, generated blocks removed


def sections(text: str) -> list[Section]:
    """The ``## `` sections of a markdown text (headings inside code blocks are not
    headings); each runs to the next ``## `` heading. A heading inside a generated block
    (``<!-- BEGIN GENERATED ... -->``) belongs to its data file, so it is left out."""
    lines = text.splitlines(keepends=True)
    generated = [(text.count("\n", 0, m.start()), text.count("\n", 0, m.end())) for m in GENERATED_RE.finditer(text)]
    starts = [tok.map[0] for tok in _tokens(text) if tok.type == "heading_open" and tok.tag == "h2"]
    out = []
    for i, start in enumerate(starts):
        if any(a <= start <= b for a, b in generated):
            continue
        end = starts[i + 1] if i + 1 < len(starts) else len(lines)
        body = GENERATED_RE.sub("", "".join(lines[start:end]))
        out.append(Section(lines[start].lstrip("#").strip(), start + 1, body))
    return out


@functools.lru_cache(maxsize=None)
def _parsed(file: Path, mtime_ns: int) -> list:
    """A test file's top-level statements, parsed once per version of the file (the proofs
    name ~330 tests in ~60 files)."""
    return ast.parse(file.read_text()).body


def proof_problem(node_id: str, root: Path = BUNDLE) -> str | None:
    """Why ``tests/test_x.py::test_y`` (or ``::Class::test_y``, ``[param]`` allowed) names
    no test of this repository, or None when the file and the function exist."""
    path, sep, rest = node_id.partition("::")
    if not sep or not re.fullmatch(r"tests/[\w/]+\.py", path) or not rest:
        return f"{node_id!r} is not a test id of the form tests/test_x.py::test_y"
    file = root / path
    if not file.is_file():
        return f"{node_id}: no file {path}"
    *classes, func = re.sub(r"\[.*\]$", "", rest).split("::")
    body = _parsed(file, file.stat().st_mtime_ns)
    for cls in classes:
        body = next((n.body for n in body if isinstance(n, ast.ClassDef) and n.name == cls), None)
        if body is None:
            return f"{node_id}: no class {cls} in {path}"
    if not any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == func for n in body):
        return f"{node_id}: no test function {func} in {path}"
    return None


PROOFS_FILE = "tests/proofs.json"  # written by tests/move_proofs.py


def proof_sidecar(root: Path = BUNDLE) -> dict:
    """``{markdown path: {section heading: [test ids] | "no-claims"}}`` from tests/proofs.json
    (tests/move_proofs.py says its shape); empty when the file is absent."""
    path = root / PROOFS_FILE
    return json.loads(path.read_text())["files"] if path.exists() else {}


def check_proofs(md: Path, root: Path = BUNDLE, sidecar: dict | None = None) -> list[str]:
    """Each ``## `` section (but ``## Contents``) proves itself (CONTRIBUTING.md, "How a
    claim is proven"): a python block that runs (no ``not-run:`` marker), tests named for it
    in tests/proofs.json (``sidecar``: that file's ``files`` object, read from ``root`` when
    None) that exist, or ``"no-claims"`` there. A ``<!-- proof: -->`` / ``<!-- no-claims -->``
    comment not yet moved (tests/move_proofs.py) counts the same; ``check_bookkeeping_comments``
    flags it. A proof naming a missing test is a problem wherever it is, and so is a
    sidecar entry naming a section the file does not have (a renamed heading)."""
    text = md.read_text()
    rel = md.relative_to(root).as_posix() if md.is_relative_to(root) else md.name
    entry = (proof_sidecar(root) if sidecar is None else sidecar).get(rel, {})
    problems = []
    titles = set()
    for sec in sections(text):
        titles.add(sec.title)
        if sec.title == "Contents":
            continue
        listed = entry.get(sec.title)
        ids = [i.strip() for m in PROOF_RE.finditer(sec.text) for i in m.group(1).split(",") if i.strip()]
        ids += listed if isinstance(listed, list) else []
        bad = [p for p in (proof_problem(i, root) for i in ids) if p]
        problems += [f"{rel}:{sec.line} '## {sec.title}': proof names a test that does not exist: {b}" for b in bad]
        runs = any(f.lang in ("python", "py") and not (f.marker and f.marker[0] == "not-run") for f in fences(sec.text))
        if not (runs or (ids and not bad) or listed == "no-claims" or NO_CLAIMS_RE.search(sec.text)):
            problems.append(f"{rel}:{sec.line} '## {sec.title}': no proof (add a python block that runs, or list "
                            f"tests/test_x.py::test_y under \"{rel}\" > \"{sec.title}\" in {PROOFS_FILE}, or \"no-claims\" "
                            "when it states no behaviour)")
    problems += [f"{rel}: {PROOFS_FILE} names a section that is not there: '## {h}' (renamed? rename its key)"
                 for h in entry if h not in titles and h != "(top)"]
    return problems


def check_proof_sidecar(root: Path = BUNDLE, sidecar: dict | None = None) -> list[str]:
    """tests/proofs.json itself: every file it names exists, every value is a non-empty
    list of test ids that exist or ``"no-claims"``."""
    problems = []
    for rel, entry in (proof_sidecar(root) if sidecar is None else sidecar).items():
        if not (root / rel).is_file():
            problems.append(f"{PROOFS_FILE}: {rel} does not exist")
            continue
        for heading, value in entry.items():
            if value == "no-claims":
                continue
            if not (isinstance(value, list) and value and all(isinstance(i, str) for i in value)):
                problems.append(f"{PROOFS_FILE}: {rel} > {heading}: expected a list of test ids or \"no-claims\", got {value!r}")
                continue
            problems += [f"{PROOFS_FILE}: {rel} > {heading}: {p}" for p in (proof_problem(i, root) for i in value) if p]
    return problems


def check_bookkeeping_comments(md: Path) -> list[str]:
    """No ``<!-- proof: -->`` or ``<!-- no-claims -->`` comment in text an agent reads (outside
    code blocks): which test proves a section is the repository's business, kept in
    tests/proofs.json (python tests/move_proofs.py moves them there)."""
    text = md.read_text()
    code = set()
    for tok in _tokens(text):
        if tok.type in ("fence", "code_block") and tok.map:
            code.update(range(*tok.map))
    hits = [text.count("\n", 0, m.start()) for r in (PROOF_RE, NO_CLAIMS_RE) for m in r.finditer(text)]
    return [f"{md.name}:{line + 1}: proof bookkeeping in agent text: run python tests/move_proofs.py"
            for line in sorted(hits) if line not in code]


# ----------------------------------------------------------------------------- api_changes.json
def check_api_change_rows() -> list[str]:
    problems = []
    for row in api_changes().get("names", []):
        if api_table.exists(row["old"]):
            problems.append(f"api_changes.json: {row['old']} still exists in the installed version")
        if row.get("new") and not api_table.exists(row["new"]):
            problems.append(f"api_changes.json: replacement {row['new']} does not resolve")
    return problems
