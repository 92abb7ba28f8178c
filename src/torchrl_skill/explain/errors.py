"""Answers derived from the installed library for ``explain.py --error``: when the error
text names a TorchRL/TensorDict object, that object is resolved live and what it really
has is printed, before (or instead of) any error-index entry; when it is a traceback
through torchrl/tensordict, the function that raised is explained (``raising.py``).

Two families of Python's own messages (CPython 3.10+ wording, verified on 3.11 with
torchrl 0.14.1):

- ``'X' object has no attribute 'y'``, ``type object 'X' has no attribute 'y'``,
  ``module 'torchrl.x' has no attribute 'y'``: X's public attributes closest to y
  (difflib), the bundle's rename rows for y
  (``src/torchrl_skill/data/api_changes.json``) and, for a module,
  the submodule that defines y when the module does not export it;
- ``X.f() got an unexpected keyword argument 'k'``, ``X.f() missing N required positional
  argument(s): ...``, ``X.f() takes N positional arguments but M were given``: X's live
  signature, its keywords closest to k and the rename rows for k. When the message names
  only ``__init__()``, the call with ``k=`` in the traceback's source lines names X.

On a release older than the newest supported line, :func:`fix_answers` names the
upstream fixes that changed or removed the message and that the release lacks
(``src/torchrl_skill/data/upstream_index.json``, ``removed``).

Nothing is imported unless one of these messages is in the text; an X that is not a
torchrl/tensordict object (a user class, ``Tensor``) gives no answer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import os
import re
import sys

from torchrl_skill.explain import error_index as ei
from torchrl_skill.stack.probe import line_of
from torchrl_skill.stack.versions import after, newest_line, upstream

ATTRIBUTE = (
    re.compile(r"module '(?P<module>(?:torchrl|tensordict)(?:\.\w+)*)' has no attribute '(?P<attr>\w+)'"),
    re.compile(r"type object '(?P<owner>[A-Za-z_][\w.]*)' has no attribute '(?P<attr>\w+)'"),
    re.compile(r"'(?P<owner>[A-Za-z_][\w.]*)' object has no attribute '(?P<attr>\w+)'"),
)
CALL = (
    re.compile(r"(?P<call>[A-Za-z_][\w.]*)\(\) got an unexpected keyword argument '(?P<kw>\w+)'"),
    re.compile(r"(?P<call>[A-Za-z_][\w.]*)\(\) missing \d+ required (?:positional|keyword-only) arguments?: (?P<names>.+)"),
    re.compile(r"(?P<call>[A-Za-z_][\w.]*)\(\) takes (?:from )?\d+ (?:to \d+ )?positional arguments? but \d+ (?:was|were) given"),
)
IMPORT = re.compile(r"cannot import name '(?P<name>\w+)' from '(?P<module>(?:torchrl|tensordict)(?:\.\w+)*)'")
SHOWN = 30  # at most this many attribute names listed


def derived(text: str) -> list[tuple[str, list[str]]]:
    """``[(row name, lines)]``: the function that raised when ``text`` is a traceback through
    torchrl/tensordict (``raising.py``), then the answer for the last error line when it is
    one of the messages above about a torchrl/tensordict object; ``[]`` when there is
    neither or torchrl cannot be imported here."""
    from . import tracebacks as tb

    out = []
    if any(f.library for f in tb.frames(text)) and _stack():
        from .raising import raising_lines

        lines = raising_lines(text)
        out += [("derived:raising-frame", lines)] if lines else []
    return out + _message_answer(text)


def _message_answer(text: str) -> list[tuple[str, list[str]]]:
    last = ei.last_error_line(text)
    found = IMPORT.search(last)
    if found and _stack():
        lines = _import_lines(found.group("name"), found.group("module"))
        return [("derived:import-name", lines)] if lines else []
    for pattern in ATTRIBUTE:
        found = pattern.search(last)
        if found and _stack():
            lines = _attribute_lines(found)
            return [("derived:no-attribute", lines)] if lines else []
    for pattern in CALL:
        found = pattern.search(last)
        if found and _stack():
            lines = _call_lines(found, ei.clean(text))
            return [("derived:call-signature", lines)] if lines else []
    return []


def _stack() -> bool:
    os.environ.setdefault("TORCHRL_CONSOLE_STREAM", "stderr")  # stdout may carry the JSON report
    try:
        with contextlib.redirect_stdout(sys.stderr):
            import torchrl  # noqa: F401
    except Exception:  # noqa: BLE001  no torchrl here: the index answers alone
        return False
    return True


def _resolve(name: str):
    """``(dotted path, object)`` of a torchrl/tensordict name, or None."""
    from .names import Found, resolve

    try:
        hit = resolve(name)
    except ValueError:
        return None
    return (hit.path, hit.obj) if isinstance(hit, Found) else None


def public_attributes(obj) -> list[str]:
    """Public names readable on ``obj`` (a class: its MRO's members and dataclass fields)."""
    names = set(dir(obj))
    if dataclasses.is_dataclass(obj):
        names |= {f.name for f in dataclasses.fields(obj)}
    return sorted(n for n in names if not n.startswith("_"))


def rename_rows(old: str, owner=None) -> list[str]:
    """The rename table's rows whose old name or keyword is ``old``, one line each. With
    ``owner`` (a class or module), only the rows about it or a class it inherits from when
    there are any (``Bounded.minimum``: the Bounded keyword row, not ContinuousBox's)."""
    from .names import api_changes

    mine = {f"{k.__module__}.{k.__qualname__}" for k in getattr(owner, "__mro__", ())} | {k.__name__ for k in getattr(owner, "__mro__", ())}
    if owner is not None and not isinstance(owner, type):
        mine.add(getattr(owner, "__name__", ""))
    rows = []
    for section, table in api_changes().items():
        for row in table:
            dotted = str(row.get("old", ""))
            if dotted.rsplit(".", 1)[-1] != old:
                continue
            about = row["callable"] if section == "kwargs" else dotted.rpartition(".")[0]
            ours = about in mine or about.rsplit(".", 1)[-1] in mine
            where = f" (keyword of {row['callable']})" if section == "kwargs" else ""
            when = f"removed in {row['removed_in']}" if row.get("removed_in") else f"changed in {row.get('changed_in') or '?'}"
            rows.append((ours, f"{dotted} -> {row.get('new') or '(no replacement)'}{where}: {when}"))
    return [line for ours, line in rows if ours] or [line for _, line in rows]


def _closest(word: str, names: list[str], renamed: list[str]) -> list[str]:
    new = [r.split(" -> ", 1)[1].split()[0].rstrip(":").rsplit(".", 1)[-1] for r in renamed]
    picks = [n for n in new if n in names] + difflib.get_close_matches(word, names, n=5, cutoff=0.6)
    return list(dict.fromkeys(picks))


def _attribute_lines(found: re.Match) -> list[str]:
    from . import facts as fx
    from .names import defined_in_submodule

    attr = found.group("attr")
    if "module" in found.groupdict():
        module = found.group("module")
        hit = _resolve(module)
        if hit is None:
            return []
        path, obj = hit
        home = defined_in_submodule(attr)
    else:
        hit = _resolve(found.group("owner"))
        if hit is None or not isinstance(hit[1], type):
            return []
        path, obj = hit
        home = None
    names = public_attributes(obj)
    label = path.rsplit(".", 1)[-1] if "module" not in found.groupdict() else path
    renamed = rename_rows(attr, obj)
    if attr in names:
        head = f"{label}.{attr} exists in the installed library: the AttributeError comes from inside it (read the frames above)"
    else:
        head = f"{label} has no attribute {attr}; closest: {', '.join(_closest(attr, names, renamed)) or 'none'}"
    lines = [head]
    lines += [ln for row in renamed for ln in fx.wrap("renamed", row)]
    if home:
        lines += fx.wrap("defined in", f"{home}.{attr} (not exported from {path}): from {home} import {attr}")
    shown = ", ".join(names[:SHOWN]) + (f", ... ({len(names)} in all)" if len(names) > SHOWN else "")
    lines += fx.wrap(f"public attributes of {path}", shown or "none")
    lines += fx.wrap("explain", f"python $SKILL_DIR/scripts/explain.py {path}")
    return lines


def _import_lines(name: str, module: str) -> list[str]:
    """``cannot import name 'X' from 'torchrl.y'`` against the installed library: X where it
    is here (then the process that raised runs another release), or the module's names
    closest to X, the rename rows for X, the submodule defining X; a private name of the
    other package (tensordict's ``_x`` imported by torchrl) means releases that do not match."""
    import importlib

    from . import facts as fx
    from .names import defined_in_submodule
    from torchrl_skill.stack.probe import VERIFIED, installed_version

    here = f"torchrl {installed_version('torchrl')} / tensordict {installed_version('tensordict')}"
    pins = f"pip install torchrl=={VERIFIED['torchrl']} tensordict=={VERIFIED['tensordict']}"
    try:
        with contextlib.redirect_stdout(sys.stderr):
            mod = importlib.import_module(module)
    except Exception:  # noqa: BLE001  a module that does not import here: nothing to compare
        return []
    if hasattr(mod, name):
        lines = [f"{module}.{name} exists in the installed {here}: the process that raised imports another "
                 f"release (print torchrl.__version__ and tensordict.__version__ there)"]
        lines += fx.wrap("import", f"from {module} import {name}")
        lines += [ln for row in rename_rows(name) for ln in fx.wrap("renamed", row)]
        return lines
    names = public_attributes(mod)
    renamed = rename_rows(name, mod)
    lines = [f"{module} has no {name} in the installed {here}; closest: {', '.join(_closest(name, names, renamed)) or 'none'}"]
    lines += [ln for row in renamed for ln in fx.wrap("renamed", row)]
    home = defined_in_submodule(name)
    if home:
        lines += fx.wrap("defined in", f"{home}.{name}: from {home} import {name}")
    if name.startswith("_"):
        lines += fx.wrap("private name", f"{module} is imported for its private {name} by the other package: "
                         f"torchrl and tensordict releases that do not match; install a matching pair ({pins})")
    lines += fx.wrap("explain", f"python $SKILL_DIR/scripts/explain.py {module}")
    return lines


def _named_in_traceback(text: str, kw: str) -> str | None:
    """The callable written with ``kw=`` in the traceback's source lines (the last one)."""
    call = re.compile(rf"([A-Za-z_][\w.]*)\((?:[^()]|\([^()]*\))*?\b{re.escape(kw)}\s*=")
    hits = [m.group(1) for ln in text.splitlines() if not ln.lstrip().startswith('File "') for m in call.finditer(ln)]
    return hits[-1] if hits else None


def _call_lines(found: re.Match, text: str) -> list[str]:
    from . import facts as fx
    from .notes import kwarg_lines

    call = found.group("call")
    kw = found.groupdict().get("kw")
    owner, _, method = call.rpartition(".")
    if not owner and kw:  # "__init__() got ...": the call in the traceback names the class
        owner, method = _named_in_traceback(text, kw) or "", "__init__" if call == "__init__" else call
    target = owner if method == "__init__" else call
    hit = _resolve(target) if target else None
    if hit is None:
        return []
    path, obj = hit
    label = path.rsplit(".", 1)[-1] if method == "__init__" else ".".join(path.split(".")[-2:]) if owner else path
    try:
        params = fx.live_signature(obj).parameters
    except (TypeError, ValueError):
        params = {}
    keywords = [p for p, v in params.items() if p != "self" and v.kind not in (v.VAR_POSITIONAL, v.VAR_KEYWORD)]
    lines = []
    if kw:
        renamed = rename_rows(kw, obj)
        noted = [ln for ln in kwarg_lines(obj) if f"keyword {kw}=" in ln]
        lines.append(f"{label} has no keyword {kw}; closest: {', '.join(_closest(kw, keywords, renamed)) or 'none'}")
        lines += [ln for row in noted or renamed for ln in fx.wrap("renamed", row)]
    else:
        required = [p for p, v in params.items() if p != "self" and v.default is v.empty
                    and v.kind not in (v.VAR_POSITIONAL, v.VAR_KEYWORD)]
        lines.append(f"{label} requires {', '.join(required) or 'no argument'}")
    lines += fx.wrap("signature", fx.signature_text(obj, label))
    for forwarded in fx.forwarded(obj):
        lines += fx.wrap("**kwargs go to", forwarded)
    lines += fx.wrap("explain", f"python $SKILL_DIR/scripts/explain.py {path}")
    return lines


# ---------------------------------------------------------------------------- older releases
def _template_regex(message: str) -> re.Pattern | None:
    parts = [re.escape(p) for p in message.split("{}")]
    if sum(len(p) for p in message.split("{}")) < 12:
        return None
    return re.compile(r".{0,200}?".join(parts).replace(r"\ ", r"\s+"))


def fix_answers(text: str, versions: dict) -> list[tuple[str, list[str]]]:
    """``(row name, lines)`` per fix that changed or removed a message occurring in ``text``
    and that the installed torchrl lacks (upstream_index.json ``removed``)."""
    installed = versions.get("torchrl")
    if not installed or after(line_of(installed), newest_line()):
        return []
    flat = " ".join(text.split())
    out = []
    for fix in upstream()["fixes"]:
        if not after(fix.get("first"), installed):
            continue
        for message in fix.get("removed", []):
            pattern = _template_regex(message)
            if pattern is not None and pattern.search(flat):
                where = ", ".join(fix.get("names", [])[:4] or fix.get("modules", [])[:2])
                lines = [f"pytorch/rl#{fix['pr']} changed or removed this message (first in torchrl "
                         f"{fix['first'] or 'no release yet'}; torchrl {installed} lacks it)",
                         f"   touched: {where}" if where else "   touched: (no public name)",
                         f"   message as it was: {message[:200]}"]
                out.append((f"upstream:fix-{fix['pr']}", lines))
                break
    return out[:5]
