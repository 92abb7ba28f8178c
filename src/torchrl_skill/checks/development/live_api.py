"""Which keywords a torchrl/tensordict callable accepts, read from the live object (no table).

Over ~400 lines on purpose: it is one job (following ``**kwargs`` through the installed
source), and the usage visitor and the call-target resolver only make sense together.

:func:`accepted_keywords` answers for the drift scanner (scan_api_drift.py): which
keyword names does ``obj(...)`` accept? The signature answers it, except where it ends in
``**kwargs``. Then the source of that function is read (``inspect.getsource`` + ``ast``)
and ``**kwargs`` is followed where it goes: names the body reads (``kwargs.pop("x")``,
``kwargs.get("x")``, ``kwargs["x"]``, ``"x" in kwargs``), a call that forwards ``**kwargs``
to a callable it can resolve (``super().__init__``, the next ``__init__`` in the MRO,
``self.method``, a module-level function or class, a metaclass ``__call__`` such as
EnvBase's), and ``if "x" in kwargs: raise ...`` (a keyword torchrl rejects on purpose,
with its message). Where the dict goes somewhere it cannot be followed (stored, iterated,
handed to an unknown callable) the answer is *open*: any name may be accepted and
nothing is judged. A function that keeps the leftover keywords without forwarding or
checking them accepts any name silently (``ignored_by``): torchrl 0.14.1's
``PPOLoss.__init__`` does, so ``ClipPPOLoss(..., entropy_cof=0.1)`` runs and the keyword
has no effect.

Imports only what the objects' own modules already imported; parses only source files of
the installed torchrl/tensordict (and the functions they forward to).
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
import textwrap
from dataclasses import dataclass, field

MAX_DEPTH = 8
LIBRARIES = ("torchrl", "tensordict")


@dataclass
class Accepted:
    """The keywords a call accepts.

    ``names``: keyword names accepted (ordered: the callable's own first); ``opened_by``:
    where some ``**kwargs`` go that cannot be followed (then any name may be accepted and
    :attr:`open` is True); ``ignored_by``: functions that keep the leftover keywords
    without an error (so an unknown name is accepted and has no effect); ``rejected``:
    name -> the message torchrl raises for it on purpose; ``via``: qualified names of the
    functions ``**kwargs`` was followed into.
    """

    names: list[str] = field(default_factory=list)
    opened_by: list[str] = field(default_factory=list)
    ignored_by: list[str] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)
    via: list[str] = field(default_factory=list)

    @property
    def open(self) -> bool:
        return bool(self.opened_by)

    def merge(self, other: "Accepted") -> None:
        self.names += [n for n in other.names if n not in self.names]
        self.opened_by += other.opened_by
        self.ignored_by += [v for v in other.ignored_by if v not in self.ignored_by]
        for k, v in other.rejected.items():
            self.rejected.setdefault(k, v)
        self.via += [v for v in other.via if v not in self.via]


def _qualname(fn) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def in_mro(cls, name: str, after=None):
    """``(owner, raw attribute)`` of ``name`` in ``cls``'s MRO (starting after ``after``)."""
    mro = list(cls.__mro__)
    if after is not None and after in mro:
        mro = mro[mro.index(after) + 1:]
    for klass in mro:
        if name in vars(klass):
            return klass, vars(klass)[name]
    return None, None


def _metaclass_call(cls):
    """A Python ``__call__`` defined by ``cls``'s metaclass (EnvBase's _EnvPostInit), or None."""
    for meta in type(cls).__mro__:
        if meta is type:
            return None, None
        raw = vars(meta).get("__call__")
        if inspect.isfunction(raw):
            return meta, raw
    return None, None


def accepted_keywords(obj, instance_of=None) -> Accepted | None:
    """Keywords ``obj(...)`` accepts (a class: its construction; a function or method: itself).

    ``instance_of``: the class whose instance the function ``obj`` is called on (a method
    call ``collector.update_policy_weights_(...)`` or ``super().__init__(...)``), so that
    ``self.x(**kwargs)`` inside it is followed. Returns None when ``obj`` has no signature
    (a builtin). Errors: none (a source that cannot be read makes the answer open).
    """
    try:
        if instance_of is not None and inspect.isfunction(obj):
            owner = next((k for k in instance_of.__mro__ if obj in vars(k).values()), instance_of)
            return _accepted_fn(obj, owner=owner, cls=instance_of, depth=0, active=frozenset())
        return _accepted_call(obj, 0, frozenset())
    except RecursionError:
        return Accepted(opened_by=["too deep to follow"])
    except Exception as err:  # a library object that breaks introspection: judge nothing
        return Accepted(opened_by=[f"introspection raised {type(err).__name__}"])


def _accepted_call(obj, depth: int, active: frozenset) -> Accepted | None:
    if inspect.isclass(obj):
        meta, call = _metaclass_call(obj)
        if call is not None:
            return _accepted_fn(call, owner=meta, cls=obj, depth=depth, active=active, construct=obj)
        return _accepted_init(obj, depth, active)
    if inspect.ismethod(obj):  # bound: a classmethod read from its class, or an instance's method
        holder = obj.__self__ if inspect.isclass(obj.__self__) else type(obj.__self__)
        return _accepted_fn(obj.__func__, owner=None, cls=holder, depth=depth, active=active, bound=True)
    if inspect.isfunction(obj):
        return _accepted_fn(obj, owner=None, cls=None, depth=depth, active=active, bound=_takes_self(obj))
    try:
        sig = inspect.signature(obj, follow_wrapped=False)
    except (TypeError, ValueError):
        return None
    return _from_signature(sig, skip_first=False, var_kw_open=True, where=_qualname(obj))


def _takes_self(fn) -> bool:
    """True for a function defined in a class body and not a staticmethod (its first
    parameter is ``self``/``cls``, filled by the call)."""
    parts = fn.__qualname__.split(".")
    if len(parts) < 2 or "<locals>" in parts:
        return False
    holder = sys.modules.get(fn.__module__)
    for part in parts[:-1]:
        holder = getattr(holder, part, None)
    if holder is None:
        return True
    return not isinstance(inspect.getattr_static(holder, parts[-1], None), staticmethod)


def _accepted_init(cls, depth: int, active: frozenset) -> Accepted | None:
    """Keywords of constructing ``cls``: its ``__init__``, plus what a custom ``__new__``
    (which receives the same keywords) names or reads."""
    owner, raw = in_mro(cls, "__init__")
    if owner is object or not inspect.isfunction(raw):
        try:
            sig = inspect.signature(cls, follow_wrapped=False)
        except (TypeError, ValueError):
            return None
        out = _from_signature(sig, skip_first=False, var_kw_open=True, where=_qualname(cls))
    else:
        out = _accepted_fn(raw, owner=owner, cls=cls, depth=depth, active=active)
    new_owner, new = in_mro(cls, "__new__")
    new = getattr(new, "__func__", new)  # __new__ may be declared a classmethod
    if new_owner is not None and new_owner.__module__ not in ("builtins", "typing") and inspect.isfunction(new):
        try:
            sig = inspect.signature(new, follow_wrapped=False)
        except (TypeError, ValueError):
            return out
        extra = _from_signature(sig, skip_first=True, var_kw_open=False).names
        var_kw = next((p.name for p in sig.parameters.values() if p.kind is p.VAR_KEYWORD), None)
        node = _function_ast(new) if var_kw else None
        if node is not None:
            uses = _KwargsUses(var_kw)
            uses.visit(node)
            extra += uses.read
        out.names += [n for n in extra if n not in out.names]
    return out


def _from_signature(sig: inspect.Signature, skip_first: bool, var_kw_open: bool, where: str = "") -> Accepted:
    params = list(sig.parameters.values())[1 if skip_first else 0:]
    names = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params)
    return Accepted(names=names, opened_by=[f"{where}: **kwargs without readable source"] if var_kw and var_kw_open else [])


@functools.lru_cache(maxsize=512)
def _function_ast(fn) -> ast.FunctionDef | None:
    try:
        # the function's own code, not what functools.wraps points at
        src = textwrap.dedent(inspect.getsource(fn.__code__))
        tree = ast.parse(src)
    except (OSError, TypeError, AttributeError, SyntaxError, IndentationError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return node
    return None


def _accepted_fn(fn, *, owner, cls, depth, active, construct=None, bound=None) -> Accepted:
    """Keywords of function ``fn`` defined on ``owner`` and called on an instance of ``cls``."""
    key = (fn, cls)
    if key in active or depth > MAX_DEPTH:
        return Accepted()  # a cycle or a very deep chain adds nothing
    try:
        sig = inspect.signature(fn, follow_wrapped=False)
    except (TypeError, ValueError):
        return Accepted(opened_by=[f"{_qualname(fn)}: no signature"])
    is_method = owner is not None if bound is None else bound
    out = _from_signature(sig, skip_first=is_method, var_kw_open=False)
    var_kw = next((p.name for p in sig.parameters.values() if p.kind is p.VAR_KEYWORD), None)
    if var_kw is None:
        return out
    node = _function_ast(fn)
    if node is None:
        out.opened_by.append(f"{_qualname(fn)}: source not readable")
        return out
    out.via.append(_qualname(fn))
    uses = _KwargsUses(var_kw)
    uses.visit(node)
    out.names += [n for n in uses.read if n not in out.names]
    out.rejected.update(uses.rejected)
    if not (uses.forwards or uses.handed or uses.tested or uses.opaque):
        # nothing forwards the rest and nothing checks for leftovers: unknown keywords are dropped silently
        out.ignored_by.append(_qualname(fn))
        return out
    if uses.opaque:
        out.opened_by.append(f"{_qualname(fn)}: {uses.opaque}")
    active = active | {key}
    for call in uses.forwards:
        target = _forward_target(call, fn, owner, cls, construct)
        if target is None:
            out.opened_by.append(f"{_qualname(fn)}: forwards **{var_kw} to {ast.unparse(call.func)}")
            continue
        kind, obj, t_owner, t_cls = target
        if kind == "absent":
            continue
        if kind == "construct":
            sub = _accepted_init(obj, depth + 1, active)
        elif kind == "method":
            sub = _accepted_fn(obj, owner=t_owner, cls=t_cls, depth=depth + 1, active=active)
        else:
            sub = _accepted_call(obj, depth + 1, active)
        if sub is None:
            out.opened_by.append(f"{_qualname(fn)}: {ast.unparse(call.func)} has no signature")
        else:
            out.merge(sub)
    for call, index in uses.handed:
        target = _forward_target(call, fn, owner, cls, construct)
        what = f"{_qualname(fn)}: hands {var_kw} to {ast.unparse(call.func)}"
        if target is not None and target[0] == "absent":
            continue
        if target is None or target[0] == "construct" or not inspect.isfunction(target[1]):
            out.opened_by.append(what)
            continue
        read = _keys_read_by_param(target[1], index + (1 if target[0] == "method" else 0))
        if read is None:
            out.opened_by.append(what)
        else:
            out.names += [n for n in read if n not in out.names]
    for name in out.rejected:
        if name in out.names:
            out.names.remove(name)
    return out


class _KwargsUses(ast.NodeVisitor):
    """How a function body uses its ``**kwargs`` dict (named ``name``)."""

    def __init__(self, name: str):
        self.name = name
        self.read: list[str] = []
        self.rejected: dict[str, str] = {}
        self.forwards: list[ast.Call] = []
        self.handed: list[tuple[ast.Call, int]] = []  # (call, positional index) f(kwargs)
        self.opaque = ""  # why the dict cannot be followed, when it cannot
        self.tested = False  # ``if kwargs: raise ...``: leftover keywords are an error
        self._handled: set[int] = set()

    def _is_kw(self, node) -> bool:
        return isinstance(node, ast.Name) and node.id == self.name

    def _const(self, node) -> str | None:
        return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None

    def _mark_all(self, node) -> None:
        for sub in ast.walk(node):
            if self._is_kw(sub):
                self._handled.add(id(sub))
                self.tested = True

    def visit_Raise(self, node: ast.Raise):
        self._mark_all(node)  # naming the dict in an error message does not accept a key

    def visit_BinOp(self, node: ast.BinOp):
        if isinstance(node.op, (ast.BitAnd, ast.Sub, ast.BitOr)):  # kwargs.keys() & known: a validation
            self._mark_all(node)
            return
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call):
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("warn", "warning", "info", "debug", "error"):
            self._mark_all(node)
            return
        for kw in node.keywords:
            if kw.arg is None and self._is_kw(kw.value):
                self.forwards.append(node)
                self._handled.add(id(kw.value))
        plain_test = isinstance(node.func, ast.Name) and node.func.id in ("len", "bool", "isinstance")
        for i, arg in enumerate(node.args):
            if self._is_kw(arg) and not plain_test:
                self.handed.append((node, i))
                self._handled.add(id(arg))
        func = node.func
        if isinstance(func, ast.Attribute) and self._is_kw(func.value):
            self._handled.add(id(func.value))
            if func.attr in ("pop", "get", "setdefault"):
                key = self._const(node.args[0]) if node.args else None
                if key is None:
                    self.opaque = f"{self.name}.{func.attr}() with a computed key"
                elif key not in self.read:
                    self.read.append(key)
            elif func.attr not in ("update", "clear"):
                self.opaque = f"{self.name}.{func.attr}()"  # items(), copy(): every key may be used
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript):
        if self._is_kw(node.value):
            self._handled.add(id(node.value))
            key = self._const(node.slice)
            if key is None:
                self.opaque = f"{self.name}[...] with a computed key"
            elif not isinstance(node.ctx, ast.Store) and key not in self.read:
                self.read.append(key)
        self.generic_visit(node)

    def visit_If(self, node: ast.If):
        test = node.test
        if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.In, ast.NotIn))
                and self._is_kw(test.comparators[0]) and self._const(test.left) is not None):
            key = self._const(test.left)
            self._handled.add(id(test.comparators[0]))
            raises = [s for s in node.body if isinstance(s, ast.Raise)]
            if isinstance(test.ops[0], ast.In) and raises:
                self.rejected[key] = _raise_text(raises[0])
            elif key not in self.read:
                self.read.append(key)
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare):
        for comp in node.comparators:
            if self._is_kw(comp) and self._const(node.left) is not None:
                self._handled.add(id(comp))
                if node.left.value not in self.read and node.left.value not in self.rejected:
                    self.read.append(node.left.value)
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name):
        if node.id == self.name and id(node) not in self._handled and isinstance(node.ctx, ast.Load):
            self._handled.add(id(node))
            self.opaque = f"{self.name} used as a value (line {node.lineno} of the function)"

    def generic_visit(self, node):
        # ``if kwargs:`` / ``len(kwargs)`` / ``not kwargs`` test the dict without using a key
        for child in ast.iter_child_nodes(node):
            if isinstance(node, (ast.If, ast.While, ast.BoolOp, ast.UnaryOp, ast.Assert)) and self._is_kw(child):
                self._handled.add(id(child))
                self.tested = True
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("len", "bool", "isinstance") and self._is_kw(child)):
                self._handled.add(id(child))
                self.tested = True
        super().generic_visit(node)


def _raise_text(node: ast.Raise) -> str:
    """The message of ``raise X("...")`` (f-string pieces joined), best effort."""
    exc = node.exc
    if isinstance(exc, ast.Call):
        name = ast.unparse(exc.func)
        parts = []
        for arg in exc.args[:1]:
            for sub in ast.walk(arg):
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                    parts.append(sub.value)
        return f"{name}: {''.join(parts)}".strip()
    return ast.unparse(exc) if exc is not None else "raise"


def _forward_target(call: ast.Call, fn, owner, cls, construct):
    """What a call inside ``fn`` goes to: ``(kind, object, owner, cls)`` or None.

    kind ``construct``: the class under construction (a metaclass ``super().__call__``);
    ``method``: a function found in an MRO (called on an instance of ``cls``);
    ``call``: any other object (a function or a class, resolved in ``fn``'s globals).
    """
    func = call.func
    glb = {**getattr(fn, "__globals__", {}), **_closure(fn), **_local_imports(fn)}
    if isinstance(func, ast.Name) and func.id in _local_aliases(fn):
        func = _local_aliases(fn)[func.id]  # direct = super().__call__; direct(**kwargs)
    if isinstance(func, ast.Attribute):
        base = func.value
        name = func.attr
        if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super":
            if construct is not None and name == "__call__":
                return ("construct", construct, None, None)
            if cls is None or owner is None:
                return None
            t_owner, raw = in_mro(cls, name, after=owner)
            if inspect.isfunction(raw):
                return ("method", raw, t_owner, cls)
            return None
        if isinstance(base, ast.Name) and base.id in ("self", "cls") and (construct or cls) is not None:
            holder = construct if base.id == "cls" and construct is not None else cls
            t_owner, raw = in_mro(holder, name)
            if t_owner is None and holder is construct:
                t_owner, raw = in_mro(type(holder), name)  # cls.x in a metaclass also finds metaclass attributes
                if t_owner is None:
                    return ("absent", None, None, None)  # a hasattr(cls, ...) branch this class never takes
            if inspect.isclass(raw):
                return ("call", raw, None, None)
            if inspect.isfunction(raw):
                return ("method", raw, t_owner, holder)
            if isinstance(raw, classmethod):
                return ("method", raw.__func__, t_owner, holder)
            if isinstance(raw, staticmethod):
                return ("call", raw.__func__, None, None)
            return None
        obj = _resolve_expr(base, glb)
        if inspect.isclass(obj):
            t_owner, raw = in_mro(obj, name)
            if inspect.isfunction(raw):  # Base.__init__(self, ...): explicit self
                return ("method", raw, t_owner, cls if cls is not None and issubclass(cls, obj) else obj)
            return None
        if obj is not None and hasattr(obj, name):
            return ("call", getattr(obj, name), None, None)
        return None
    obj = _resolve_expr(func, glb)
    return ("call", obj, None, None) if obj is not None and callable(obj) else None


def _closure(fn) -> dict:
    """The free variables of ``fn`` (a decorator's wrapper sees the wrapped function so)."""
    cells = getattr(fn, "__closure__", None) or ()
    out = {}
    for name, cell in zip(fn.__code__.co_freevars, cells):
        try:
            out[name] = cell.cell_contents
        except ValueError:  # an empty cell
            continue
    return out


def _local_aliases(fn) -> dict:
    """``name = <attribute expression>`` assignments in ``fn``'s body: {name: expression}."""
    node = _function_ast(fn)
    out = {}
    for sub in ast.walk(node) if node is not None else ():
        if (isinstance(sub, ast.Assign) and len(sub.targets) == 1 and isinstance(sub.targets[0], ast.Name)
                and isinstance(sub.value, ast.Attribute)):
            out[sub.targets[0].id] = sub.value
    return out


def _local_imports(fn) -> dict:
    """``from torchrl.x import Y`` statements inside ``fn``'s body: {local name: object}.

    Only torchrl/tensordict modules are imported (they are what the function would import)."""
    node = _function_ast(fn)
    out = {}
    if node is None:
        return out
    import importlib

    for sub in ast.walk(node):
        if isinstance(sub, ast.ImportFrom) and sub.module and not sub.level and sub.module.split(".")[0] in LIBRARIES:
            try:
                mod = importlib.import_module(sub.module)
            except Exception:  # an optional backend missing: that branch cannot be followed
                continue
            for alias in sub.names:
                if hasattr(mod, alias.name):
                    out[alias.asname or alias.name] = getattr(mod, alias.name)
    return out


def _resolve_expr(node, glb: dict):
    if isinstance(node, ast.Name):
        if node.id in glb:
            return glb[node.id]
        import builtins

        return getattr(builtins, node.id, None)
    if isinstance(node, ast.Attribute):
        base = _resolve_expr(node.value, glb)
        return getattr(base, node.attr, None) if base is not None else None
    return None


def _keys_read_by_param(fn, index: int) -> list[str] | None:
    """Keys function ``fn`` reads from the dict passed as its positional argument ``index``."""
    node = _function_ast(fn)
    if node is None:
        return None
    params = [a.arg for a in node.args.posonlyargs + node.args.args]
    if index >= len(params):
        return None
    uses = _KwargsUses(params[index])
    uses.visit(node)
    if uses.forwards or uses.handed:
        return None
    return list(uses.read)  # storing the dict in a helper is fine: it is not the user's call


def deprecation(obj) -> tuple[str, str] | None:
    """``(since, text)`` when the installed torchrl/tensordict marks ``obj`` itself deprecated:
    a ``.. deprecated:: X`` directive at the top level of its docstring (a property's getter,
    a function, a class); the indented lines under it are the text. An Args entry that says
    one *parameter* is deprecated is indented, so it does not mark the callable. Read from
    the live object: tensordict 0.15.3's ``TensorDictModule.device`` gives ``("0.15", "This
    property will be removed in TensorDict 0.17 because modules may contain parameters and
    buffers on multiple devices.")``; nothing in torchrl 0.14.1/tensordict 0.14.3 carries one."""
    target = obj.fget if isinstance(obj, property) else getattr(obj, "__func__", obj)
    module = getattr(target, "__module__", "") or ""
    if module.split(".")[0] not in LIBRARIES:
        return None
    doc = target.__dict__.get("__doc__") if inspect.isclass(target) else getattr(target, "__doc__", None)
    lines = inspect.cleandoc(doc).splitlines() if isinstance(doc, str) else []
    for i, line in enumerate(lines):
        if line.startswith(".. deprecated::"):
            since = line.split("::", 1)[1].strip()
            body = []
            for nxt in lines[i + 1:]:
                if nxt and not nxt[:1].isspace():
                    break
                body.append(nxt.strip())
            return since, " ".join(" ".join(body).split())
    return None
