"""What ``scripts/explain.py`` says about any live object: its kind, signature (seeing
through metaclasses, overloads and ``**kwargs`` forwarding), first docstring paragraph,
constructor parameters grouped by purpose, and the optional backends its module imports.
The facts measured per kind are in ``kinds.py`` (losses: ``loss.py``).

Everything is read from the installed library at run time (``inspect``, the class's MRO,
a tiny instance where one is cheap); the only tables here say which parameter names
serve which purpose and which base class makes which kind.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import inspect
import re
import sys
import textwrap
import warnings

# (kind, module prefix of the base class, base class name), most specific first.
KINDS = (
    ("loss module", "torchrl.objectives", "LossModule"),
    ("value estimator", "torchrl.objectives.value", "ValueEstimatorBase"),
    ("target updater", "torchrl.objectives", "TargetNetUpdater"),
    ("transform", "torchrl.envs.transforms", "Transform"),
    ("env", "torchrl.envs", "EnvBase"),
    ("collector", "torchrl.collectors", "BaseCollector"),
    ("replay buffer", "torchrl.data.replay_buffers", "ReplayBuffer"),
    ("storage", "torchrl.data.replay_buffers", "Storage"),
    ("sampler", "torchrl.data.replay_buffers", "Sampler"),
    ("writer", "torchrl.data.replay_buffers", "Writer"),
    ("spec", "torchrl.data", "TensorSpec"),
    ("trainer", "torchrl.trainers", "Trainer"),
    ("tensordict", "tensordict", "TensorDictBase"),
    ("module", "tensordict.nn", "TensorDictModuleBase"),
    ("distribution", "torch.distributions", "Distribution"),
    ("torch module", "torch.nn", "Module"),
)

# Parameter name -> purpose; the first pattern that matches wins.
PURPOSES = (
    ("networks", r"^(?!.*_keys?$).*(network|module|^actor|^critic|^policy|model|mixer|^qvalue)"),
    ("keys", r"(_keys?$|^keys?$|_key_|^in_keys|^out_keys)"),
    ("processes and weight sync", r"(num_workers|num_collectors|^sync$|backend|mp_start|cat_results|weight_sync|weight_updater|worker|update_at_each|num_threads|^shared|^create_env)"),
    ("devices and memory", r"(device|pin_memory|prefetch|compil|scratch|memmap|^storage$|existsok|cudagraph)"),
    ("targets", r"(^delay_|^target_(?!entropy)|^tau$|update_interval)"),
    ("coefficients and clipping", r"(coef|alpha|beta|clip|entropy|temperature|^eps|loss_function|reduction|normaliz|separate_losses|prioritized_weights)"),
    ("amount of data", r"(frames|batch|size|^len|_len$|slices|ndim|^num_|^max_|^n_|steps|traj|horizon|capacity|^length)"),
    ("discounting and value", r"(gamma|lmbda|lambda|value|advantage|gae|bootstrap|discount|^time_dim)"),
    ("exploration and sampling", r"(exploration|interaction|deterministic|sampling|return_log_prob|distribution|^safe$|^spec$|action_spec|^spec_|random|noise|annealing|seed)"),
)


def kind_of(obj) -> str:
    """``"loss module"``, ``"transform"``, ... from the class's MRO (nothing is imported);
    ``"class"``, ``"function"``, ``"method"``, ``"module"`` or ``"value"`` otherwise."""
    if isinstance(obj, type):
        for kind, prefix, base in KINDS:
            if any(k.__name__ == base and k.__module__.startswith(prefix) for k in obj.__mro__):
                return kind
        return "enum" if any(k.__name__ == "Enum" for k in obj.__mro__) else "class"
    if inspect.ismodule(obj):
        return "module"
    if isinstance(obj, property):
        return "property"
    if inspect.isfunction(obj) or inspect.isbuiltin(obj) or inspect.ismethod(obj):
        return "function"
    return "callable" if callable(obj) else "value"


def signature_text(obj, label: str) -> str:
    """``label(params with defaults)``; for builtins the first docstring line that reads as a
    signature; ``not callable: <type> <repr>`` for a value."""
    if isinstance(obj, property):
        obj = obj.fget
    if not callable(obj):
        return f"not callable: {type(obj).__name__} {_short_repr(obj)}"
    try:
        sig = live_signature(obj)
        return f"{label}{_plain(sig)}"
    except (TypeError, ValueError):
        first = (inspect.getdoc(obj) or "").strip().splitlines()
        if first and re.match(r"[\w.]+\(.*\)", first[0]):
            return f"{label}{first[0][first[0].index('('):]} (from the docstring: a compiled function)"
        return f"{label}(...) (a compiled callable without an introspectable signature)"


def _var_only(sig: inspect.Signature) -> bool:
    kinds = {p.kind for p in sig.parameters.values()}
    return bool(kinds) and kinds <= {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}


def _drop_self(sig: inspect.Signature) -> inspect.Signature:
    return sig.replace(parameters=list(sig.parameters.values())[1:])


def live_signature(obj) -> inspect.Signature:
    """The real signature of a class or callable (TypeError/ValueError when it has none):
    ``inspect.signature``, seeing through what hides the real parameters: a metaclass
    ``__call__`` that takes ``(*args, ..., **kwargs)`` (ReplayBuffer, Collector's own
    ``__signature__`` aside) and an ``__init__(*args, **kwargs)`` whose real forms are
    ``typing.overload`` stubs (TransformedEnv, 0.14.1)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sig = inspect.signature(obj)
        func = obj.__init__ if isinstance(obj, type) else obj
        if isinstance(obj, type) and "__signature__" not in vars(type(obj)) and type(obj).__call__ is not type.__call__:
            init = _drop_self(inspect.signature(obj.__init__))
            extra = [p for p in sig.parameters.values()
                     if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in init.parameters]
            if not _var_only(init) or not extra:
                params = list(init.parameters.values())
                at = next((i for i, p in enumerate(params) if p.kind == p.VAR_KEYWORD), len(params))
                extra = [p.replace(kind=p.KEYWORD_ONLY) for p in extra]
                sig = init.replace(parameters=_ordered(params[:at] + extra + params[at:]))
        if _var_only(sig):
            import typing

            try:
                overloads = getattr(typing, "get_overloads", lambda f: [])(func)
            except AttributeError:  # a C slot wrapper (object.__init__) has no overloads
                overloads = []
            if overloads:
                first = inspect.signature(overloads[0])
                sig = _drop_self(first) if isinstance(obj, type) else first
    return _without_ray_tracing(sig)


def _without_ray_tracing(sig: inspect.Signature) -> inspect.Signature:
    """The signature less ``_ray_trace_ctx``: once a class is wrapped by ``ray.remote`` (a
    Ray-backed buffer or collector built anywhere in the process), Ray rewrites the
    ``__signature__`` of its methods in place to add that keyword (ray/util/tracing/
    tracing_helper.py, ``_inject_tracing_into_class``); callers never pass it."""
    params = [p for p in sig.parameters.values() if p.name != "_ray_trace_ctx"]
    return sig if len(params) == len(sig.parameters) else sig.replace(parameters=params)


def _ordered(params: list) -> list:
    """Parameters sorted into the order ``inspect.Signature`` requires (by kind, stable)."""
    return sorted(params, key=lambda p: int(p.kind))


def forwarded(obj) -> list[str]:
    """``"Callee(param=default, ...)"`` lines for :func:`forwarded_params`."""
    return [f"{name}{_plain(inspect.Signature(params))}" for name, params in forwarded_params(obj)]


def forwarded_params(obj, depth: int = 3, shown: set | None = None) -> list[tuple[str, list]]:
    """``(callee name, parameters)`` for each callable that ``obj``'s ``**kwargs`` are
    passed on to (read from the source of ``__init__``: a call holding ``**kwargs``,
    ``super().__init__(...)`` resolved along the MRO), with the parameters not shown
    yet, as keyword-only; followed ``depth`` levels down the chain of ``**kwargs``."""
    import ast

    func = obj.__init__ if isinstance(obj, type) else obj
    try:
        sig = live_signature(obj)
    except (TypeError, ValueError):
        return []
    var_kw = next((p.name for p in sig.parameters.values() if p.kind == p.VAR_KEYWORD), None)
    if var_kw is None or not hasattr(func, "__code__") or depth <= 0:
        return []
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError, SyntaxError):
        return []
    out: list[tuple[str, list]] = []
    shown = (shown or set()) | set(sig.parameters)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not any(k.arg is None and getattr(k.value, "id", None) == var_kw for k in node.keywords):
            continue
        callee = _callee(node.func, obj, func)
        if callee is None:
            continue
        try:
            target = live_signature(callee)
        except (TypeError, ValueError):
            continue
        extra = [p.replace(kind=p.KEYWORD_ONLY) for p in target.parameters.values()
                 if p.name not in shown and p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if extra:
            name = getattr(callee, "__qualname__", getattr(callee, "__name__", "?")).replace(".__init__", "")
            if name not in [n for n, _ in out]:
                out.append((name, extra))
            shown |= {p.name for p in extra}
        out += [row for row in forwarded_params(callee, depth - 1, shown) if row[0] not in [n for n, _ in out]]
    return out


def _callee(node, obj, func):
    """The object a call's function expression names: a global of ``func``'s module, or the
    next ``__init__`` in the MRO for ``super().__init__``."""
    import ast

    if isinstance(node, ast.Name):
        return func.__globals__.get(node.id)
    if isinstance(node, ast.Attribute) and node.attr == "__init__" and isinstance(node.value, ast.Call) \
            and getattr(node.value.func, "id", None) == "super" and isinstance(obj, type):
        mro = obj.__mro__
        owner = next((i for i, k in enumerate(mro) if k.__dict__.get("__init__") is func), 0)
        nxt = next((k for k in mro[owner + 1:] if "__init__" in k.__dict__), None)
        return nxt if nxt is not None and nxt is not object else None
    return None


def _plain(sig: inspect.Signature) -> str:
    """``(a, b=1, *, c=InteractionType.DETERMINISTIC)``: no annotations (30-parameter
    signatures must stay readable), classes and enum members by name."""
    parts, star = [], False
    for p in sig.parameters.values():
        if p.kind == p.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        if p.kind == p.VAR_POSITIONAL:
            star = True
            parts.append(f"*{p.name}")
        elif p.kind == p.VAR_KEYWORD:
            parts.append(f"**{p.name}")
        elif p.default is p.empty:
            parts.append(p.name)
        else:
            parts.append(f"{p.name}={_default(p.default)}")
        if p.kind == p.POSITIONAL_ONLY and (p is list(sig.parameters.values())[-1] or
                                            list(sig.parameters.values())[list(sig.parameters).index(p.name) + 1].kind != p.POSITIONAL_ONLY):
            parts.append("/")
    return f"({', '.join(parts)})"


def _default(value) -> str:
    import enum

    if isinstance(value, type):
        return value.__name__
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if callable(value) and hasattr(value, "__name__"):
        return value.__name__
    return _short_repr(value, 80)


def _short_repr(obj, limit: int = 160) -> str:
    text = repr(obj)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def first_paragraph(obj, limit: int = 500) -> str:
    """The docstring's first paragraph on one line (``(no docstring)`` when there is none)."""
    target = obj.fget if isinstance(obj, property) else obj
    # a class's own docstring only: inspect.getdoc would show the base class's text
    raw = target.__dict__.get("__doc__") if isinstance(target, type) else getattr(target, "__doc__", None)
    doc = inspect.cleandoc(raw) if isinstance(raw, str) else ""
    if not doc or (not isinstance(obj, type) and not callable(obj) and raw == type(obj).__doc__):
        return "(no docstring)"
    para = " ".join(doc.strip().split("\n\n")[0].split())
    return para if len(para) <= limit else para[: limit - 3] + "..."


def parameter_groups(obj) -> list[str]:
    """``"purpose: name, name"`` lines for the parameters of ``obj``'s signature."""
    try:
        params = [p for p in live_signature(obj).parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    except (TypeError, ValueError):
        return []
    if len(params) < 4:
        return []
    groups: dict[str, list[str]] = {}
    for p in params:
        purpose = next((label for label, rx in PURPOSES if re.search(rx, p.name)), "other")
        groups.setdefault(purpose, []).append(p.name + ("" if p.default is not p.empty else " (required)"))
    order = [label for label, _ in PURPOSES] + ["other"]
    return [f"{g}: {', '.join(groups[g])}" for g in order if g in groups]


def own_methods(obj) -> list[str]:
    """``name(params)`` of the public methods a class adds to what its bases define (for
    ``VecNormV2`` on 0.14.1: ``freeze()``, ``frozen_copy()``, ...), read from the live class
    in definition order; overrides of a base's method (``forward``, ``_step``) are left out.
    Empty for a non-class or a class that adds none."""
    if not isinstance(obj, type):
        return []
    bases = obj.__mro__[1:]
    found = []
    for name, value in vars(obj).items():
        func = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
        if name.startswith("_") or isinstance(value, (type, property)) or not callable(func):
            continue
        if any(name in vars(base) for base in bases):
            continue
        try:
            sig = _drop_self(inspect.signature(func)) if not isinstance(value, staticmethod) else inspect.signature(func)
            params = ", ".join(p.name if p.default is p.empty else f"{p.name}=" for p in sig.parameters.values()
                               if p.name != "cls")
        except (TypeError, ValueError):
            params = "..."
        found.append(f"{name}({params})")
    return found


@functools.lru_cache(maxsize=None)
def _optional_dists() -> tuple[str, ...]:
    """torchrl's optional dependencies: the dists its metadata lists under an extra."""
    from torchrl_skill.stack.probe import requires  # the distribution that provides torchrl, whatever its name (torchrl-nightly)

    reqs = requires("torchrl")
    names = {re.match(r"[A-Za-z0-9_.\-]+", r).group(0) for r in reqs if "extra ==" in r}
    return tuple(sorted(n for n in names if n.lower() not in ("torch", "torchrl", "tensordict") and not n.startswith("pytest")))


def backends_used(obj) -> list[str]:
    """Optional backends the module defining ``obj`` imports or probes, each as
    ``"name installed X"`` or ``"name not installed (pip install name)"``; never imports them."""
    module = getattr(obj, "__module__", "") or ""
    if not module.startswith("torchrl.") or inspect.isfunction(obj) and "." in getattr(obj, "__qualname__", ""):
        return []  # tensordict's core and methods would list every utility its module touches
    return list(_module_backends(module))


@functools.lru_cache(maxsize=None)
def _candidates() -> tuple[re.Pattern, dict]:
    names = {}
    for dist in _optional_dists():
        for name in (dist.lower().replace("-", "_"), dist.split("-")[0].lower()):
            names.setdefault(name, dist)
    alt = "|".join(sorted(map(re.escape, names), key=len, reverse=True)) or r"(?!x)x"  # no extras: match nothing
    rx = re.compile(rf"^\s*(?:import|from)\s+({alt})\b|(?:find_spec|implement_for)\(\s*[\"']({alt})[\"']", re.M)
    return rx, names


def dist_of(import_name: str) -> str:
    """The distribution torchrl's optional extras name for a top-level import name
    (``hydra`` -> ``hydra-core``); the import name itself when no extra lists it."""
    return _candidates()[1].get(import_name.lower(), import_name)


@functools.lru_cache(maxsize=None)
def _module_backends(module_name: str) -> tuple[str, ...]:
    module = sys.modules.get(module_name)
    try:
        source = inspect.getsource(module) if module else ""
    except (OSError, TypeError):
        return ()
    rx, names = _candidates()
    found = dict.fromkeys(a or b for a, b in rx.findall(source))
    out = []
    for name in found:
        dist = names[name]
        try:
            present = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            present = False
        out.append(f"{dist} installed {_version(dist)}" if present else f"{dist} not installed (pip install {dist})")
    return tuple(dict.fromkeys(out))


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "(version unknown)"


def wrap(label: str, text: str, width: int = 100) -> list[str]:
    """``label: text`` wrapped under a hanging indent."""
    return textwrap.wrap(f"{label}: {text}", width=width, initial_indent="  ", subsequent_indent="      ",
                         break_long_words=False, break_on_hyphens=False) or [f"  {label}:"]
