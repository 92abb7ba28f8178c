"""Build src/torchrl_skill/data/upstream_index.json from a pytorch/rl clone: what each torchrl release lacks.

Facts only, read from git and from the released wheels: no commit titles, no upstream
prose, no code. For every bug-fix commit (subject tagged ``[BugFix]``) after the oldest
supported release (``--since``, default v0.11.0) it records:

- ``pr``: the pull-request number (the ``(#NNNN)`` suffix of the subject; commits without
  one are left out) and ``commit`` (12 hex digits);
- ``first``: the first release that has it: the earliest tag whose history holds a commit
  of the same PR (cherry-picks count), else the earliest ``--wheel`` release whose sources
  hold the fix's added lines (at least 80% of its substantive ones), else ``null`` (not in
  any release known here);
- ``modules`` and ``names``: the public torchrl modules and classes/functions whose lines
  it changed (an enclosing qualified name cut at its first private part: a fix inside
  ``ReplayBuffer._add`` is recorded as ``ReplayBuffer``);
- ``removed`` and ``added``: the library's own error and warning messages (the constant
  text of ``raise X("...")`` and ``warnings.warn("...")``; f-string fields become ``{}``)
  that the fix took out of or put into the code.

It also records ``exports``: for each release line's newest release, which public name
each public torchrl package exports (``__all__``, else the names its ``__init__`` imports
or defines), so an older install can be told where a name lives in the newest line.

Run from the repo root: ``python benchmarks/build_fix_index.py --repo /path/to/rl
--wheel 0.14.0=~/.cache/torchrl-skill-matrix/wheels/torchrl-0.14.0-...whl --wheel 0.14.1=...``.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "src" / "torchrl_skill" / "data" / "upstream_index.json"
SCHEMA = "torchrl-skill.upstream-index/1"
TAG_RE = re.compile(r"^v(\d+)\.(\d+)\.(\d+)$")
PR_RE = re.compile(r"\(#(\d+)\)\s*$")
FIX_RE = re.compile(r"^\s*\[\s*bug\s*fix\s*\]", re.I)
MIN_MESSAGE = 12  # shorter constant text ("Error", "{}") identifies nothing


def git(repo: Path, *args: str, check: bool = True) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=check).stdout


def vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


# ---------------------------------------------------------------------------- releases
def tags(repo: Path, since: str) -> list[str]:
    found = [t for t in git(repo, "tag").split() if TAG_RE.match(t)]
    return sorted((t[1:] for t in found if vkey(t[1:]) >= vkey(since)), key=vkey)


def prs_in(repo: Path, ref: str) -> set[int]:
    """PR numbers of every commit in ``ref``'s history (subjects ending in ``(#NNNN)``)."""
    return {int(m.group(1)) for s in git(repo, "log", "--format=%s", ref).splitlines() if (m := PR_RE.search(s))}


# ---------------------------------------------------------------------------- source facts
def public_module(path: str) -> str | None:
    """``torchrl/data/replay_buffers/samplers.py`` -> ``torchrl.data.replay_buffers.samplers``; None if private."""
    if not (path.startswith("torchrl/") and path.endswith(".py")):
        return None
    parts = path[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return None if any(p.startswith("_") for p in parts) else ".".join(parts)


def _message(node: ast.AST) -> str | None:
    """Constant text of a message argument (f-string fields as ``{}``; ``"a" + x`` keeps ``a{}``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        left, right = _message(node.left), _message(node.right)
        if left is not None or right is not None:
            return (left or "{}") + (right or "{}") if isinstance(node.op, ast.Add) else left
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return _message(node.func.value)
    return None


def messages(tree: ast.AST) -> set[str]:
    """The error/warning texts a module raises or warns with (normalised whitespace)."""
    out = set()
    for node in ast.walk(tree):
        call = None
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            call = node.exc
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "warn":
            call = node
        if call is not None and call.args:
            text = _message(call.args[0])
            if text and len(text.replace("{}", "").strip()) >= MIN_MESSAGE:
                out.add(" ".join(text.split()))
    return out


def enclosing_names(tree: ast.AST, lines: set[int]) -> set[str]:
    """Public qualified names (cut at the first private part) of the defs enclosing ``lines``."""
    found = set()

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                end = getattr(child, "end_lineno", child.lineno)
                if any(child.lineno <= ln <= end for ln in lines):
                    qual = prefix + [child.name]
                    public = []
                    for part in qual:
                        if part.startswith("_"):
                            break
                        public.append(part)
                    if public:
                        found.add(".".join(public))
                    visit(child, qual)

    visit(tree, [])
    return found


def changed_lines(diff: str) -> tuple[set[int], set[int], list[str]]:
    """``(old line numbers, new line numbers, added line texts)`` of a ``-U0`` diff of one file."""
    old, new, added = set(), set(), []
    for m in re.finditer(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", diff, re.M):
        a, b, c, d = int(m.group(1)), int(m.group(2) or 1), int(m.group(3)), int(m.group(4) or 1)
        old.update(range(a, a + b))
        new.update(range(c, c + d))
    for ln in diff.splitlines():
        if ln.startswith("+") and not ln.startswith("+++"):
            added.append(ln[1:])
    return old, new, added


def parse(text: str | None) -> ast.AST | None:
    if text is None:
        return None
    try:
        return ast.parse(text)
    except SyntaxError:
        return None


def show(repo: Path, ref: str, path: str) -> str | None:
    out = subprocess.run(["git", "-C", str(repo), "show", f"{ref}:{path}"], capture_output=True, text=True)
    return out.stdout if out.returncode == 0 else None


def substantive(lines: list[str]) -> list[str]:
    """Added lines that identify a change: code of 20+ characters, not comments or docstrings' prose."""
    out = []
    for ln in lines:
        s = ln.strip()
        if len(s) >= 20 and not s.startswith(("#", '"""', "'''")) and re.search(r"[=()\[\]:.]", s):
            out.append(s)
    return out


def fix_facts(repo: Path, sha: str) -> dict:
    """Modules, names, added lines and messages removed/added by one commit (torchrl/*.py only)."""
    files = [f for f in git(repo, "diff-tree", "--no-commit-id", "-r", "--name-only", f"{sha}^", sha).split()
             if f.startswith("torchrl/") and f.endswith(".py")]
    modules, names, removed, added_msgs, added_lines = set(), set(), set(), set(), {}
    for path in files:
        diff = git(repo, "diff", "-U0", f"{sha}^", sha, "--", path)
        old_lines, new_lines, added = changed_lines(diff)
        before_text = show(repo, f"{sha}^", path)
        before, after = parse(before_text), parse(show(repo, sha, path))
        module = public_module(path)
        if module:
            modules.add(module)
        for tree, lines in ((before, old_lines), (after, new_lines)):
            if tree is not None:
                names |= enclosing_names(tree, lines)
        old_msgs = messages(before) if before is not None else set()
        new_msgs = messages(after) if after is not None else set()
        removed |= old_msgs - new_msgs
        added_msgs |= new_msgs - old_msgs
        # only lines the file did not hold before tell whether a later source has the fix
        known = {ln.strip() for ln in (before_text or "").splitlines()}
        added_lines[path] = [ln for ln in substantive(added) if ln not in known]
    return {"modules": sorted(modules), "names": sorted(names), "removed": sorted(removed), "added": sorted(added_msgs),
            "_added_lines": added_lines}


_WHEEL_LINES: dict[str, set[str]] = {}


def _all_lines(wheel: zipfile.ZipFile) -> set[str]:
    """Every stripped line of the wheel's torchrl sources (for a file that moved: 0.14 split
    replay_buffers.py and samplers.py into packages)."""
    if wheel.filename not in _WHEEL_LINES:
        _WHEEL_LINES[wheel.filename] = {ln.strip() for n in wheel.namelist() if n.startswith("torchrl/") and n.endswith(".py")
                                        for ln in wheel.read(n).decode("utf-8", "replace").splitlines()}
    return _WHEEL_LINES[wheel.filename]


def in_wheel(wheel: zipfile.ZipFile, added_lines: dict[str, list[str]]) -> bool | None:
    """True when the wheel's sources hold >= 80% of the fix's substantive new lines (in the
    same file, or anywhere in the package when the wheel has no such file); None when the
    fix added no such line (it cannot be told). Checked against the tags (0.11.1 to 0.13.3
    wheels, fixes of known first release): 260 of 272 decidable answers agreed; the others
    were fixes whose lines a later release rewrote (reported as absent)."""
    total = held = 0
    names = set(wheel.namelist())
    for path, lines in added_lines.items():
        if not lines:
            continue
        if path in names:
            text = {ln.strip() for ln in wheel.read(path).decode("utf-8", "replace").splitlines()}
        else:
            text = _all_lines(wheel)
        total += len(lines)
        held += sum(ln in text for ln in lines)
    return None if total == 0 else held / total >= 0.8


# ---------------------------------------------------------------------------- exports
def exported(init_sources: dict[str, str]) -> dict[str, str]:
    """``{name: package}`` for the public packages' ``__init__`` sources ``{package: text}``
    (a name exported by several packages keeps the shortest, e.g. torchrl.envs over
    torchrl.envs.transforms)."""
    out: dict[str, str] = {}
    for package in sorted(init_sources, key=lambda p: (p.count("."), p)):
        tree = parse(init_sources[package])
        if tree is None:
            continue
        names = None
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
                try:
                    names = [n for n in ast.literal_eval(node.value) if isinstance(n, str)]
                except ValueError:
                    names = None
        if names is None:
            names = []
            for node in tree.body:
                if isinstance(node, ast.ImportFrom):
                    names += [a.asname or a.name for a in node.names if a.name != "*"]
                elif isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                    names.append(node.name)
        for name in names:
            if not name.startswith("_"):
                out.setdefault(name, package)
    return out


def _params(fn: ast.FunctionDef) -> set[str]:
    a = fn.args
    return {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")}


def class_members(sources: dict[str, str]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """``({ClassName: public members its body defines}, {callable: parameters})`` over public
    modules' sources: methods, properties and class attributes (not inherited ones); the
    parameters of each class's ``__init__`` (key ``ClassName``), public method
    (``ClassName.method``) and module-level function (``function``)."""
    members: dict[str, set[str]] = {}
    params: dict[str, set[str]] = {}
    for text in sources.values():
        tree = parse(text)
        if tree is None:
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                params.setdefault(node.name, set()).update(_params(node))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                names = members.setdefault(node.name, set())
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        if item.name == "__init__":
                            params.setdefault(node.name, set()).update(_params(item))
                        elif not item.name.startswith("_"):
                            names.add(item.name)
                            params.setdefault(f"{node.name}.{item.name}", set()).update(_params(item))
                    elif isinstance(item, ast.Assign):
                        names.update(t.id for t in item.targets if isinstance(t, ast.Name) and not t.id.startswith("_"))
                    elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and not item.target.id.startswith("_"):
                        names.add(item.target.id)
    return members, params


def sources_from_git(repo: Path, ref: str) -> tuple[dict[str, str], set[str]]:
    """``({path: source}, {public packages})`` of a tag (every torchrl/*.py: public classes
    live in private modules too, e.g. 0.14's torchrl/collectors/_single.py)."""
    paths = [p for p in git(repo, "ls-tree", "-r", "--name-only", ref, "torchrl/").split() if p.endswith(".py")]
    return ({p: show(repo, ref, p) or "" for p in paths},
            {m for p in paths if p.endswith("/__init__.py") and (m := public_module(p))})


def sources_from_wheel(wheel: zipfile.ZipFile) -> tuple[dict[str, str], set[str]]:
    """``({path: source}, {public packages})`` of a released wheel."""
    paths = [p for p in wheel.namelist() if p.startswith("torchrl/") and p.endswith(".py")]
    return ({p: wheel.read(p).decode("utf-8", "replace") for p in paths},
            {m for p in paths if p.endswith("/__init__.py") and (m := public_module(p))})


def line_newest(releases: list[str]) -> dict[str, str]:
    """``{"0.13": "0.13.3", ...}``: the newest release of each line."""
    out: dict[str, str] = {}
    for v in sorted(releases, key=vkey):
        out[".".join(v.split(".")[:2])] = v
    return out


# ---------------------------------------------------------------------------- main
def build(repo: Path, since: str, wheels: dict[str, Path]) -> dict:
    releases = tags(repo, since)
    pr_sets = {v: prs_in(repo, f"v{v}") for v in releases}
    heads = ["HEAD", *[f"v{v}" for v in releases]]
    log = git(repo, "log", "--no-merges", "--format=%H%x00%s", *heads, f"^v{since}")
    zips = {v: zipfile.ZipFile(p) for v, p in sorted(wheels.items(), key=lambda kv: vkey(kv[0]))}
    fixes: dict[int, dict] = {}
    for row in log.splitlines():
        sha, subject = row.split("\x00", 1)
        m = PR_RE.search(subject)
        if not (FIX_RE.match(subject) and m):
            continue
        pr = int(m.group(1))
        if pr in fixes:
            continue
        first = next((v for v in releases if pr in pr_sets[v]), None)
        if first == since:  # already in the oldest supported release: nobody in range lacks it
            continue
        facts = fix_facts(repo, sha)
        added_lines = facts.pop("_added_lines")
        if not (facts["modules"] or facts["names"]):
            continue  # touched no public torchrl source (tests, docs, CI)
        if first is None:
            first = next((v for v, z in zips.items() if in_wheel(z, added_lines)), None)
        fixes[pr] = {"pr": pr, "commit": sha[:12], "first": first, **facts}
    newest = line_newest(releases + list(wheels))
    exports: dict[str, dict[str, list[str]]] = {}
    modules: dict[str, list[str]] = {}
    members_by_line: dict[str, dict[str, set[str]]] = {}
    params_by_line: dict[str, dict[str, set[str]]] = {}
    for line, version in sorted(newest.items(), key=lambda kv: vkey(kv[0])):
        sources, package_names = sources_from_wheel(zips[version]) if version in zips else sources_from_git(repo, f"v{version}")
        public = {m: t for p, t in sources.items() if (m := public_module(p))}
        inits = {m: t for m, t in public.items() if m in package_names}
        for name, package in exported(inits).items():
            exports.setdefault(name, {}).setdefault(package, []).append(line)
        for module in public:
            modules.setdefault(module, []).append(line)
        members_by_line[line], params_by_line[line] = class_members(sources)
    lines_all = sorted(newest, key=vkey)

    def first_lines(by_line: dict[str, dict[str, set[str]]]) -> dict[str, dict[str, str]]:
        """What the newest line's classes/callables have, with the first line having each,
        for those the oldest line lacked."""
        out: dict[str, dict[str, str]] = {}
        for owner, names in by_line[lines_all[-1]].items():
            for name in names:
                first = next(ln for ln in lines_all if name in by_line[ln].get(owner, set()))
                if first != lines_all[0]:
                    out.setdefault(owner, {})[name] = first
        return out

    added, params_added = first_lines(members_by_line), first_lines(params_by_line)
    head = git(repo, "rev-parse", "HEAD").strip()
    return {
        "schema": SCHEMA,
        "built_from": {
            "repository": "pytorch/rl", "commit": head, "commit_date": git(repo, "log", "-1", "--format=%cs", "HEAD").strip(),
            "tags": [f"v{v}" for v in releases],
            "wheels": {v: {"file": p.name, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()} for v, p in wheels.items()},
            "command": "python benchmarks/build_fix_index.py --repo PATH " + " ".join(f"--wheel {v}=PATH" for v in wheels),
        },
        "releases": sorted(set(releases) | set(wheels), key=vkey),
        "lines": newest,
        "fixes": sorted(fixes.values(), key=lambda f: f["pr"]),
        "exports": {k: exports[k] for k in sorted(exports)},
        # public modules missing from some line (all others exist in every line)
        "modules": {m: ls for m, ls in sorted(modules.items()) if len(ls) != len(lines_all)},
        "members_added": {c: dict(sorted(m.items())) for c, m in sorted(added.items())},
        "params_added": {c: dict(sorted(m.items())) for c, m in sorted(params_added.items())},
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.strip(), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", type=Path, required=True, help="a pytorch/rl clone (bare is fine)")
    parser.add_argument("--since", default="0.11.0", help="the oldest supported release (default: 0.11.0)")
    parser.add_argument("--wheel", action="append", default=[], metavar="VERSION=PATH",
                        help="a released torchrl wheel for a release the clone has no tag of (repeatable)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"default: {OUT.relative_to(ROOT)}")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not (args.repo / "HEAD").exists() and not (args.repo / ".git").exists():
        parser.error(f"--repo {args.repo}: not a git clone")
    wheels = {}
    for spec in args.wheel:
        version, _, path = spec.partition("=")
        if not Path(path).expanduser().is_file():
            parser.error(f"--wheel {spec}: no such file")
        wheels[version] = Path(path).expanduser()
    if f"v{args.since}" not in git(args.repo, "tag").split():
        parser.error(f"--since {args.since}: the clone has no tag v{args.since}")
    data = build(args.repo, args.since, wheels)
    args.out.write_text(json.dumps(data, indent=None, separators=(",", ":"), sort_keys=False) + "\n")
    print(f"{args.out}: {len(data['fixes'])} fixes, {len(data['exports'])} exported names, "
          f"{args.out.stat().st_size // 1024} KB, from {data['built_from']['commit'][:12]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
