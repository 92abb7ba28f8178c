"""Where an error message is raised, read from the installed torchrl and tensordict sources,
for ``explain.py --error`` when no error-index entry confirms the text.

Every ``raise X(message)`` of both packages is a *site*: its message expression turned into
a template (string literals kept; f-string fields, ``%`` and ``.format`` fields, and names
assigned a string earlier in the function become ``{}``), the exception class, the function
that holds it and the ``if`` that guards it (``ast``, never an import). A message matches a
site when the template's literal parts occur in it, in order, with anything between them;
the longest literal match wins. The compiled extensions' strings (``torchrl/_torchrl*.so``,
``tensordict/_C*.so``: printable runs, the ``strings`` tool's view) are searched the same
way, ``%s``/``{}`` read as fields.

Cost (CONTRIBUTING.md, "Budgets"): nothing is parsed up front. The files are read once
(522 files, 13 MB for torchrl 0.14.1 + tensordict 0.14.3, ~0.1 s); three-word windows of
the message pick the few files that can hold it, and only those are parsed. The public
callers of a private site come from a lazy, name-based call scan of the sources (one regular
expression per level over the text, up to :data:`DEPTH` levels): a caller is a function
whose body calls the name, so a same-named function elsewhere can add a caller (said in
the output). Nothing is cached on disk: the lookup leaves nothing behind.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass

from .index import TOPS, full_index, package_dir

FIELD = None  # a template part that varies
PYTHON_WORDING = frozenset({
    "object has no attribute", "module has no attribute", "type object has no attribute", "has no attribute",
    "got an unexpected keyword argument", "object is not subscriptable", "object is not callable",
    "object is not iterable", "is not defined", "division by zero",
})
MIN_LITERAL = 12  # literal characters a site must match (shorter: "{}" or "key {}" match anything)
WINDOW = 3  # words per window of the message used to pick candidate files
MAX_FILES = 8
DEPTH = 4  # caller levels scanned above a private raising function
COMMON = 40  # a name called from more places than this is not expanded (split, get, ...)
SHOWN = 8  # public callers listed


@dataclass(frozen=True)
class Site:
    """One raise statement. ``path``: under site-packages (``tensordict/_lazy.py``, or the
    extension's file name); ``line``: 1-based; ``function``: qualified name in its module
    (``LazyStackedTensorDict.lazy_stack``, ``<module>``, ``(compiled)`` for the extension);
    ``exc``: the exception class as written; ``template``: literal parts and ``None`` for
    fields; ``condition``: the guarding ``if`` (``if out.batch_size != batch_size``, with
    its enclosing branches) or ""; ``decorators``: torch functions the holding function
    implements (``torch.stack`` for ``@implements_for_td(torch.stack)``)."""

    path: str
    line: int
    function: str
    exc: str
    template: tuple
    condition: str = ""
    decorators: tuple[str, ...] = ()

    @property
    def compiled(self) -> bool:
        return self.function == "(compiled)"

    @property
    def module(self) -> str:
        return self.path[:-3].replace("/", ".").removesuffix(".__init__")

    @property
    def python_wording(self) -> bool:
        """True when the literal text is only CPython's own wording (``'{}' object has no
        attribute '{}'`` in a ``__getattr__``): such a template matches any user's message
        of that kind, so it names no torchrl/tensordict site (pytorch/rl#1275 matched it)."""
        words = " ".join(re.sub(r"[^a-z ]", " ", " ".join(p for p in self.template if p).lower()).split())
        return words in PYTHON_WORDING

    @property
    def literal(self) -> int:
        return sum(len(p) for p in self.template if p)

    def text(self) -> str:
        """The message as written, each field shown as ``{}``."""
        return "".join("{}" if p is FIELD else p for p in self.template)

    @functools.cached_property
    def regex(self) -> re.Pattern:
        parts = []
        for part in self.template:
            if part is FIELD:
                parts.append(r"[\s\S]*?")
            else:
                parts.append(r"\s*".join(re.escape(w) for w in part.split()) if part.strip() else r"\s*")
        body = "".join(parts)
        return re.compile(body)


# ---------------------------------------------------------------------------- sources
@functools.lru_cache(maxsize=None)
def sources() -> dict[str, str]:
    """``{path under site-packages: text}`` of every .py file of the installed packages."""
    out = {}
    for top in TOPS:
        base = package_dir(top)
        if base is None:
            continue
        for file in sorted(base.rglob("*.py")):
            out[f"{top}/{file.relative_to(base).as_posix()}"] = file.read_text(encoding="utf-8", errors="replace")
    return out


@functools.lru_cache(maxsize=None)
def extension_strings() -> dict[str, tuple[str, ...]]:
    """``{path: printable strings of 8+ characters}`` of each compiled extension of torchrl
    and tensordict (``torchrl/_torchrl.cpython-311-x86_64-linux-gnu.so``)."""
    out = {}
    for top in TOPS:
        base = package_dir(top)
        if base is None:
            continue
        for file in sorted(base.glob("*.so")) + sorted(base.glob("*.pyd")):
            try:
                data = file.read_bytes()
            except OSError:
                continue
            runs = re.findall(rb"[\x20-\x7e]{8,}", data)
            out[f"{top}/{file.name}"] = tuple(r.decode("ascii") for r in runs if b" " in r)
    return out


# ---------------------------------------------------------------------------- messages
_EXC = re.compile(r"^\s*(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception|Warning|Exit)|KeyError|StopIteration)\s*:\s?")


def message_of(text: str) -> tuple[str, str]:
    """``(exception class, message)`` of the last error in ``text`` (a message, a line
    ``KeyError: ...`` or a whole traceback); the message spans the lines after the error
    line up to the next traceback header. A KeyError's repr quotes are removed."""
    from torchrl_skill.explain import error_index as ei

    lines = ei.clean(text).splitlines()
    starts = [i for i, ln in enumerate(lines) if _EXC.match(ln)]
    if not starts:
        return "", " ".join(text.split())
    body = []
    for ln in lines[starts[-1]:]:
        if ln.startswith(("Traceback (most recent", "During handling", "The above exception")) or ln.lstrip().startswith('File "'):
            break
        body.append(ln)
    found = _EXC.match(body[0])
    message = " ".join(" ".join([body[0][found.end():], *body[1:]]).split())
    exc = found.group(1)
    if exc == "KeyError" and len(message) > 1 and message[0] == message[-1] and message[0] in "'\"":
        message = message[1:-1].replace("\\'", "'").replace('\\"', '"')
    return exc, message


WINDOWS = 10  # windows searched per message, spread over it


def _windows(message: str) -> list[str]:
    """Up to :data:`WINDOWS` runs of three words of ``message``, spread over it; runs
    holding a digit (a size, an index: a field's value) come last."""
    words = message.split()
    if len(words) < WINDOW:
        return [message] if len(message) >= MIN_LITERAL else []
    wins = list(dict.fromkeys(" ".join(words[i:i + WINDOW]) for i in range(len(words) - WINDOW + 1)))
    if len(words) <= 12:  # a short message with a field every few words: pairs too
        wins += [w for w in dict.fromkeys(" ".join(words[i:i + 2]) for i in range(len(words) - 1)) if len(w) >= 8]
    wins.sort(key=lambda w: any(c.isdigit() for c in w))
    if len(wins) <= WINDOWS:
        return wins
    step = len(wins) / WINDOWS
    return [wins[int(i * step)] for i in range(WINDOWS)]


@functools.lru_cache(maxsize=None)
def _joined() -> tuple[bytes, tuple[int, ...], tuple[str, ...]]:
    """Every source as UTF-8 in one NUL-separated bytes object (bytes.find is several times
    faster than str.find on 13 MB of mixed-width text), each file's start offset, its path."""
    paths = tuple(sources())
    blobs = [sources()[p].encode("utf-8", errors="replace") for p in paths]
    starts, pos = [], 0
    for blob in blobs:
        starts.append(pos)
        pos += len(blob) + 1
    return b"\x00".join(blobs), tuple(starts), paths


RARE = 60  # a window found more often than this ("is not a") picks no file


def candidate_files(message: str) -> dict[str, frozenset[int]]:
    """``{path: lines where the message's windows occur}`` for the files holding most of
    its three-word windows (at most :data:`MAX_FILES`, best first)."""
    import bisect

    text, starts, paths = _joined()
    found: dict[str, set] = {}
    lines: dict[str, set] = {}
    for win in _windows(message):
        needle = win.encode("utf-8", errors="replace")
        at, spots = text.find(needle), []
        while at >= 0 and len(spots) <= RARE:
            spots.append(at)
            at = text.find(needle, at + 1)
        if len(spots) > RARE:
            continue
        for at in spots:
            i = bisect.bisect_right(starts, at) - 1
            found.setdefault(paths[i], set()).add(win)
            lines.setdefault(paths[i], set()).add(text.count(b"\n", starts[i], at) + 1)
    if not found:
        return {}
    best = max(len(v) for v in found.values())
    ranked = sorted((p for p, v in found.items() if len(v) * 4 >= best * 3), key=lambda p: -len(found[p]))
    return {p: frozenset(lines[p]) for p in ranked[:MAX_FILES]}


# ---------------------------------------------------------------------------- templates
_PERCENT = re.compile(r"%(?:\(\w+\))?[-#0 +]*\d*(?:\.\d+)?[sdrifgxXeEcu]")
_FORMAT = re.compile(r"\{[^{}]*\}")


def _split(literal: str, field: re.Pattern) -> list:
    out = []
    for i, piece in enumerate(field.split(literal)):
        if i:
            out.append(FIELD)
        out.append(piece)
    return out


def _template(node, assigned: dict, depth: int = 0) -> list:
    """Literal parts and FIELDs of a message expression."""
    if depth > 6:
        return [FIELD]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return [v.value if isinstance(v, ast.Constant) else _named(v, assigned) for v in node.values]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _template(node.left, assigned, depth + 1) + _template(node.right, assigned, depth + 1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant) \
            and isinstance(node.left.value, str):
        return _split(node.left.value, _PERCENT)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        base = node.func.value
        if isinstance(base, ast.Name):  # tensordict's _KEY_ERROR.format(...)
            base = assigned.get(base.id) or _imported_constant(base.id) or base
        if isinstance(base, ast.Constant) and isinstance(base.value, str):
            return _split(base.value.replace("{{", "\x00").replace("}}", "\x01"), _FORMAT)
    if isinstance(node, ast.Name) and node.id in assigned:
        return _template(assigned[node.id], assigned, depth + 1)
    if isinstance(node, ast.Name) and _imported_constant(node.id) is not None:
        return _template(_imported_constant(node.id), assigned, depth + 1)
    return [FIELD]


@functools.lru_cache(maxsize=None)
def _imported_constant(name: str):
    """The value expression of a module-level ``NAME = "..."`` in any installed source (a
    message constant imported from another module: ``from tensordict.utils import
    _KEY_ERROR``), or None; only upper-case names, found once."""
    if not name.lstrip("_").isupper():
        return None
    text = _joined()[0]
    at = text.find(f"\n{name} = ".encode())
    return _value_at(at + 1) if at >= 0 else None


def _value_at(at: int):
    """The value of the assignment statement starting at byte ``at`` of the joined sources."""
    text = _joined()[0]
    lines = text[at:at + 2000].decode("utf-8", errors="replace").split("\n")
    for n in range(1, min(len(lines), 12) + 1):
        try:
            node = ast.parse("\n".join(lines[:n])).body[0]
        except SyntaxError:
            continue
        return node.value if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Constant, ast.JoinedStr, ast.BinOp)) else None
    return None


def _named(field: ast.FormattedValue, assigned: dict):
    """A field naming the module itself (``{__name__!r}``) is the module's name, a literal:
    torchrl's ``module 'torchrl.envs' has no attribute`` is not gym's ``module 'gym' has
    no attribute``. Any other field varies."""
    value = field.value
    if isinstance(value, ast.Name) and value.id == "__name__" and "__name__" in assigned:
        name = assigned["__name__"].value
        return repr(name) if field.conversion == ord("r") else name
    return FIELD


def _merge(parts: list) -> tuple:
    out: list = []
    for p in parts:
        if p is FIELD:
            if out and out[-1] is FIELD:
                continue
            out.append(FIELD)
        elif p:
            p = p.replace("\x00", "{").replace("\x01", "}")
            if out and out[-1] is not FIELD:
                out[-1] += p
            else:
                out.append(p)
    return tuple(out)


def _message_node(exc: ast.expr):
    if not isinstance(exc, ast.Call):
        return None
    if exc.args:
        return exc.args[0]
    return next((k.value for k in exc.keywords if k.arg in ("msg", "message")), None)


def _condition(chain: list) -> str:
    """The guarding ``if`` tests, innermost first (at most three levels)."""
    out = []
    for node, branch in reversed(chain):
        if isinstance(node, ast.If):
            test = " ".join(ast.unparse(node.test).split())
            test = test if len(test) <= 160 else test[:157] + "..."
            out.append(f"if {test}" if branch == "body" else f"else of `if {test}`")
        elif isinstance(node, ast.ExceptHandler):
            caught = ast.unparse(node.type) if node.type is not None else "any exception"
            out.append(f"in `except {caught}`")
        if len(out) == 3:
            break
    return "; inside ".join(out)


_IMPLEMENTS = re.compile(r"implements\w*$")


def _implements(func) -> tuple[str, ...]:
    out = []
    for dec in getattr(func, "decorator_list", ()):
        if isinstance(dec, ast.Call) and _IMPLEMENTS.search(ast.unparse(dec.func)) and dec.args:
            text = ast.unparse(dec.args[0])
            if text.startswith("torch."):
                out.append(text)
    return tuple(out)


@functools.lru_cache(maxsize=None)
def _tree(path: str):
    source = sources().get(path)
    try:
        return ast.parse(source) if source is not None else None
    except SyntaxError:
        return None


@functools.lru_cache(maxsize=None)
def file_sites(path: str) -> tuple[Site, ...]:
    """Every raise statement of the installed file ``path`` that carries a message with at
    least :data:`MIN_LITERAL` literal characters."""
    return sites_near(path, None)


@functools.lru_cache(maxsize=None)
def sites_near(path: str, lines: frozenset[int] | None) -> tuple[Site, ...]:
    """The raise statements of ``path`` in the functions (or module-level blocks) that hold
    one of ``lines`` (all of them for None): only those parts of the tree are walked."""
    tree = _tree(path)
    if tree is None:
        return ()
    out: list[Site] = []
    module = path[:-3].replace("/", ".").removesuffix(".__init__")
    constants = {n.targets[0].id: n.value for n in tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
                 and isinstance(n.targets[0], ast.Name) and isinstance(n.value, (ast.Constant, ast.JoinedStr, ast.BinOp))}

    def assignments(func) -> list:
        found = []
        for node in ast.walk(func):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                found.append((node.lineno, node.targets[0].id, node.value, False))
            elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and isinstance(node.target, ast.Name):
                found.append((node.lineno, node.target.id, node.value, True))
        return sorted(found, key=lambda row: row[0])

    def holds(node) -> bool:
        end = getattr(node, "end_lineno", None)
        return lines is None or end is None or any(node.lineno <= n <= end for n in lines)

    def visit(node, names: list, funcs: list, chain: list, near: bool):
        for field, value in ast.iter_fields(node):
            here = chain + [(node, field)] if isinstance(node, ast.If) and field in ("body", "orelse") else chain
            for child in value if isinstance(value, list) else [value]:
                if not isinstance(child, (ast.stmt, ast.ExceptHandler)):
                    continue  # a raise is a statement: expressions hold none
                if not near and not holds(child):
                    continue
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    # the whole function: a message assigned on a hit line is raised further down
                    visit(child, names + [child.name, "<locals>"], funcs + [child], [], True)
                elif isinstance(child, ast.ClassDef):
                    visit(child, names + [child.name], funcs, [], near)
                else:
                    inner = here + [(child, "body")] if isinstance(child, ast.ExceptHandler) else here
                    if isinstance(child, ast.Raise) and child.exc is not None:
                        _add(child, names, funcs, inner)
                    visit(child, names, funcs, inner, near)

    def _add(node: ast.Raise, names, funcs, chain):
        message = _message_node(node.exc)
        if message is None:
            return
        func = funcs[-1] if funcs else None
        assigned: dict = dict(constants)  # a module-level message (tensordict's _KEY_ERROR), then the function's own
        assigned["__name__"] = ast.Constant(module)
        for line, name, value, augment in (assignments(func) if func is not None else ()):
            if line >= node.lineno:
                break
            assigned[name] = ast.BinOp(assigned[name], ast.Add(), value) if augment and name in assigned else value
        template = _merge(_template(message, assigned))
        if sum(len(p) for p in template if p) < MIN_LITERAL:
            return
        exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        qual = ".".join(names[:-1]) if names and names[-1] == "<locals>" else ".".join(names)
        out.append(Site(path, node.lineno, qual or "<module>", ast.unparse(exc), template,
                        _condition(chain), _implements(func) if func is not None else ()))

    visit(tree, [], [], [], lines is None)
    return tuple(out)


def _extension_sites(message: str) -> list[Site]:
    out = []
    for path, strings in extension_strings().items():
        for string in strings:
            template = _merge(_split(_FORMAT.sub("%s", string), _PERCENT))
            site = Site(path, 0, "(compiled)", "", template)
            if site.literal >= MIN_LITERAL and site.regex.search(message):
                out.append(site)
    return out


_CONSTANT = re.compile(rb"\n(_?[A-Z][A-Z0-9_]+) = \(?\s*[frFR]*[\"']")


@functools.lru_cache(maxsize=None)
def _constants() -> tuple[tuple[str, Site], ...]:
    """``(name, pseudo-site)`` of each upper-case module-level string constant of both
    packages (its template; the site's path/line are the constant's own)."""
    import bisect

    text, starts, paths = _joined()
    out = []
    for found in _CONSTANT.finditer(text):
        name = found.group(1).decode()
        value = _value_at(found.start() + 1)
        if value is None:
            continue
        template = _merge(_split(value.value, _FORMAT) if isinstance(value, ast.Constant) and isinstance(value.value, str)
                          else _template(value, {}))
        i = bisect.bisect_right(starts, found.start()) - 1
        site = Site(paths[i], text.count(b"\n", starts[i], found.start()) + 2, "<module>", "", template)
        if site.literal >= MIN_LITERAL:
            out.append((name, site))
    return tuple(out)


def constant_uses(flat: str) -> dict[str, frozenset[int]]:
    """``{path: lines}`` where a module constant whose template matches ``flat`` is used."""
    import bisect

    names = [name for name, site in _constants() if site.regex.search(flat)]
    text, starts, paths = _joined()
    lines: dict[str, set] = {}
    for name in names:
        pattern = re.compile(rb"(?<![\w])" + re.escape(name.encode()) + rb"(?![\w])(?! = )")
        for found in pattern.finditer(text):
            i = bisect.bisect_right(starts, found.start()) - 1
            lines.setdefault(paths[i], set()).add(text.count(b"\n", starts[i], found.start()) + 1)
    return {p: frozenset(v) for p, v in lines.items()}


def covered(site: Site, flat: str) -> int:
    """Characters of ``flat`` (a message cut short or pasted in part) that ``site``'s
    literal parts explain, taken in order: whole parts found after the previous one, the
    message's head as the end of a part, its tail as the start of one, or the whole
    message inside one part."""
    lits = [" ".join(p.split()) for p in site.template if p is not FIELD and p.strip()]
    matched, pos = 0, 0
    for lit in lits:
        at = flat.find(lit, pos)
        if at >= 0:
            matched, pos = matched + len(lit), at + len(lit)
            continue
        rest = flat[pos:].strip()
        if matched == 0 and flat in lit and len(flat) * 2 >= len(lit):  # a pasted middle, not a phrase of it
            return len(flat)
        if matched == 0:
            head = next((k for k in range(min(len(lit), len(flat)), 7, -1) if lit.endswith(flat[:k])), 0)
            if head:
                matched, pos = head, head
                continue
        if len(rest) >= 8 and lit.startswith(rest):
            return matched + len(rest)
    return matched


def _same_class(exc: str, raised: str) -> bool:
    """False only when both are known and differ (a ZeroDivisionError is no ValueError
    site's); a site raising a class held in a variable (``raise err_type(...)``) stays."""
    last = raised.rsplit(".", 1)[-1]
    if not exc or not last or not last[:1].isupper():
        return True
    return exc == last


def says(site: Site, text: str) -> bool:
    """True when ``text`` is the site's message, whole or cut short after a field or a
    literal part (an index entry's signature ``key "sample_log_prob" not found in
    TensorDict`` is tensordict's ``key "{}" not found in {} with keys {}``): the template's
    first parts, :data:`MIN_LITERAL` literal characters at least, match all of it."""
    flat = " ".join(text.split())
    for k in range(len(site.template), 0, -1):
        head = Site(site.path, site.line, site.function, site.exc, site.template[:k])
        if head.literal < MIN_LITERAL:
            break
        if head.regex.fullmatch(flat) or (head.template[-1] is not FIELD and head.regex.search(flat)
                                          and flat.endswith(" ".join(head.template[-1].split()))):
            return True
    return False


def find(message: str) -> list[Site]:
    """The sites whose template matches ``message`` (one error message, whitespace free
    to vary), the most literal characters matched first; sites of the compiled extensions
    only when no source file holds one. When no template matches whole (a message cut
    short, or pasted in part), the sites whose literal parts, in order, explain 60% of it."""
    if not message.strip():
        return []
    exc, flat = message_of(message)
    flat = flat[:4000]
    candidates = [s for path, near in candidate_files(flat).items() for s in sites_near(path, near)
                  if not s.python_wording and _same_class(exc, s.exc)]
    hits = [s for s in candidates if s.regex.search(flat)]
    if not hits:  # a message kept in a module constant and raised elsewhere (tensordict's _KEY_ERROR)
        hits = [s for path, near in constant_uses(flat).items() for s in sites_near(path, near)
                if s.regex.search(flat) and _same_class(exc, s.exc)]
    if not hits:
        hits = _extension_sites(flat)
    if not hits:
        scored = [(covered(s, flat), s) for s in candidates]
        scored = [(n, s) for n, s in scored if n >= MIN_LITERAL and n >= 0.6 * len(flat)]
        best = max((n for n, _ in scored), default=0)
        return sorted((s for n, s in scored if n * 2 >= best), key=lambda s: (-covered(s, flat), s.path, s.line))
    best = max(s.literal for s in hits)
    return sorted((s for s in hits if s.literal * 2 >= best), key=lambda s: (-s.literal, s.path, s.line))


# ---------------------------------------------------------------------------- callers
_DEF = re.compile(r"^([ \t]*)(?:async[ \t]+)?(def|class)[ \t]+(\w+)", re.M)


@functools.lru_cache(maxsize=None)
def _defs(path: str) -> tuple[tuple[int, int, str, str], ...]:
    """``(line, indent, kind, name)`` of each def/class line of a file (a text scan)."""
    text = sources()[path]
    out = []
    for found in _DEF.finditer(text):
        out.append((text.count("\n", 0, found.start()) + 1, len(found.group(1).expandtabs()), found.group(2), found.group(3)))
    return tuple(out)


def enclosing(path: str, line: int, indent: int) -> str:
    """Qualified name of the function or class holding ``line`` (indented by ``indent``):
    the nearest def/class line above with a smaller indent, then its own, and so on."""
    chain = []
    for number, depth, kind, name in reversed(_defs(path)):
        if number < line and depth < indent:
            chain.append(name)
            indent = depth
            if depth == 0:
                break
    return ".".join(reversed(chain)) or "<module>"


def is_public(path: str, qualname: str) -> bool:
    """True when the top-level name is exported by a public module and every later part
    is public or a dunder (``TensorDict.__setitem__``)."""
    parts = qualname.split(".")
    if not parts or parts[0] not in full_index() or "<module>" in parts:
        return False
    return all(not p.startswith("_") or (p.startswith("__") and p.endswith("__")) for p in parts[1:])


def _usage(path: str, qualname: str) -> str:
    parts = qualname.split(".")
    module = full_index().get(parts[0], (path,))[0]
    if parts[-1] == "__init__":
        return f"{'.'.join(parts[:-1])}(...) (from {module})"
    return f"{qualname} (from {module})"


def _call_sites(names: frozenset[str]) -> dict[str, list[tuple[str, int, str]]]:
    """``{name: [(path, line, caller qualname)]}``: the calls ``name(`` / ``.name(`` of
    each name in the sources, by text (a ``def name(`` line is not a call)."""
    pattern = re.compile(r"(?<![\w])(" + "|".join(sorted(map(re.escape, names))) + r")\s*\(")
    out: dict[str, list] = {n: [] for n in names}
    for path, text in sources().items():
        if not any(n in text for n in names):
            continue
        for found in pattern.finditer(text):
            start = text.rfind("\n", 0, found.start()) + 1
            head = text[start:found.start()]
            if head.rstrip().endswith(("def", "class")) or head.lstrip().startswith("#"):
                continue
            line = text.count("\n", 0, found.start()) + 1
            indent = len(head) - len(head.lstrip())
            out[found.group(1)].append((path, line, enclosing(path, line, indent + 1)))
    return out


def public_callers(site: Site, limit: int = SHOWN) -> tuple[list[tuple[str, str]], list[str]]:
    """``([(public API, how it reaches the site)], [names not expanded])``: the public
    functions and methods whose calls reach ``site``'s function, nearest first. The site's
    own function comes first when it is public; a torch function it implements
    (``@implements_for_td(torch.stack)``) is a public API too. Name-based: a call to any
    function of the same name counts."""
    found: list[tuple[str, str]] = [(f"{t}(...) on TensorDicts (tensordict overrides it)", f"{site.function} implements it")
                                    for t in site.decorators]
    if site.compiled:
        users = sorted(p for p, text in sources().items() if "_torchrl" in text and not p.endswith("__init__.py"))
        return [(p, "imports the compiled extension") for p in users[:limit]], []
    if is_public(site.path, site.function):
        found.append((_usage(site.path, site.function), "this function itself"))
        return found, []
    seen = {site.function}
    frontier = {site.function.split(".")[-1]: site.function}
    skipped: list[str] = []
    for _ in range(DEPTH):
        if not frontier or len(found) >= limit:
            break
        calls = _call_sites(frozenset(frontier))
        nxt: dict[str, str] = {}
        for name, rows in calls.items():
            if len(rows) > COMMON:
                skipped.append(f"{name} ({len(rows)} call sites)")
                continue
            for path, line, caller in rows:
                if caller in seen or caller == "<module>":
                    continue
                seen.add(caller)
                route = f"{caller} -> {frontier[name]}"
                if is_public(path, caller):
                    found.append((_usage(path, caller), f"{path}:{line}: {route}"))
                else:
                    last = caller.split(".")[-1]
                    if last.startswith("<") or last in nxt:
                        continue
                    nxt[last] = route
        frontier = nxt
    return found[:limit], skipped
