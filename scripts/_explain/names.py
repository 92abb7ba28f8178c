"""Finding a TorchRL/TensorDict name for ``scripts/explain.py``: the public names of the
installed library, read from each public module's ``__all__`` without importing it, and
the import of only the module that holds the asked name.

Forms accepted: a short name (``ClipPPOLoss``), a dotted path
(``torchrl.envs.TransformedEnv``) and a member (``ReplayBuffer.extend``,
``torchrl.data.ReplayBuffer.extend``). Optional backends (Ray, vLLM, SGLang) are hidden
while importing unless the name lives with them (:func:`hide_backends`).
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import functools
import importlib
import importlib.util
import io
import re
import sys
from dataclasses import dataclass
from pathlib import Path

# The public modules issue 12 names; their ``__all__`` is what "every public name" means.
PUBLIC_MODULES = (
    "torchrl.envs",
    "torchrl.envs.transforms",
    "torchrl.collectors",
    "torchrl.data",
    "torchrl.data.replay_buffers",
    "torchrl.modules",
    "torchrl.objectives",
    "torchrl.objectives.value",
    "torchrl.trainers",
    "torchrl.envs.llm",
    "torchrl.modules.llm",
    "torchrl.objectives.llm",
    "torchrl.collectors.llm",
    "torchrl.data.llm",
    "torchrl.services",
    "torchrl.data.vla",
    "tensordict",
    "tensordict.nn",
)
# Searched too for a short name (after PUBLIC_MODULES), but not part of "every public name".
EXTRA_MODULES = (
    "torchrl.envs.utils",
    "torchrl.record",
    "torchrl.weight_update",
    "torchrl.objectives.value.functional",
    "torchrl.trainers.algorithms",
    "torchrl.envs.libs",
    "torchrl.modules.models",
    "torchrl.render",
    "torchrl.data.datasets",
    "torchrl.collectors.utils",
    "torchrl.objectives.utils",
)
# Optional backends torchrl imports at module level when they are installed
# (torchrl/data/replay_buffers/ray_buffer.py imports ray, 0.14.1): hidden unless asked for.
BACKENDS = {"ray": re.compile(r"(^|\.|_)ray|Ray"), "vllm": re.compile(r"vllm|vLLM|VLLM"), "sglang": re.compile(r"sglang|SGLang")}
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


class BadName(ValueError):
    """The text is not a Python identifier or dotted path (explain exits 2)."""


@dataclass(frozen=True)
class Found:
    """A resolved name. ``path``: the canonical dotted path asked for
    (``torchrl.objectives.ClipPPOLoss``); ``obj``: the live object; ``owner``: the class a
    member was read from (None for a top-level name); ``exported_by``: every public module
    whose ``__all__`` lists the top-level name (for a name no public module lists, the
    module that defines it, with ``public`` False)."""

    asked: str
    path: str
    obj: object
    owner: object | None
    exported_by: tuple[str, ...]
    public: bool = True  # False: found only in a submodule's namespace (:func:`defined_in_submodule`)


@dataclass(frozen=True)
class NotFound:
    """A name the installed library does not have: the closest public names and the
    bundle's rename rows for it."""

    asked: str
    closest: tuple[str, ...]
    renames: tuple[dict, ...]
    reason: str = ""


def check_name(text: str) -> str:
    """``text`` stripped, or :class:`BadName` when it is empty or not an identifier/dotted
    path. ``file.py:Name`` / ``module:Name`` (user code) is checked by ``_user_code``."""
    name = (text or "").strip()
    if not name:
        raise BadName("empty name")
    if ":" in name:
        import _user_code

        _user_code.parse_target(name, form="path/to/file.py:ClassName")  # exits 2 on a bad target
        return name
    if not NAME_RE.fullmatch(name):
        raise BadName(f"{name!r} is not a Python identifier or dotted path")
    return name


def resolve_user(spec: str) -> Found:
    """A class or function of the user's code (``my_transforms.py:AddHundred``), imported
    with ``_user_code`` (exit 2 when it cannot be imported)."""
    import _user_code

    with contextlib.redirect_stdout(sys.stderr):
        obj = _user_code.load_attr(_user_code.parse_target(spec, form="path/to/file.py:ClassName"))
    return Found(spec, spec, obj, None, ())


def _package_dir(top: str) -> Path | None:
    spec = importlib.util.find_spec(top)  # a top-level find_spec imports nothing
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _module_file(module: str) -> Path | None:
    top, *rest = module.split(".")
    base = _package_dir(top)
    if base is None:
        return None
    folder = base.joinpath(*rest)
    if (folder / "__init__.py").is_file():
        return folder / "__init__.py"
    single = folder.with_suffix(".py")
    return single if single.is_file() else None


def static_all(module: str) -> tuple[str, ...]:
    """``module.__all__`` read from its source with ``ast`` (no import); falls back to
    importing the module when ``__all__`` is not a literal; a module without ``__all__``
    gives the public classes and functions it defines."""
    path = _module_file(module)
    names: list[str] = []
    literal = path is not None
    if path is not None:
        body = ast.parse(path.read_text(encoding="utf-8")).body
        has_all = False
        for node in body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
            if any(getattr(t, "id", None) == "__all__" for t in targets):
                has_all = True
                try:
                    names += list(ast.literal_eval(node.value))
                except ValueError:
                    literal = False
        if not has_all:  # no __all__: the public classes and functions the module defines
            names = [n.name for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and not n.name.startswith("_")]
    if not literal:
        with hide_backends(module), contextlib.redirect_stdout(io.StringIO()):
            names = list(getattr(importlib.import_module(module), "__all__", []))
    return tuple(dict.fromkeys(names))


@functools.lru_cache(maxsize=None)
def public_index(modules: tuple[str, ...] = PUBLIC_MODULES + EXTRA_MODULES) -> dict[str, tuple[str, ...]]:
    """``{short name: (every module of ``modules`` listing it, in that order)}``. A module
    that is absent from the installed version is skipped."""
    index: dict[str, list[str]] = {}
    for module in modules:
        try:
            names = static_all(module)
        except ImportError:
            continue
        for name in names:
            index.setdefault(name, []).append(module)
    return {k: tuple(v) for k, v in index.items()}


def public_names() -> list[str]:
    """Every public ``module.name`` of PUBLIC_MODULES (a name two modules list appears twice)."""
    return [f"{m}.{n}" for n, mods in public_index(PUBLIC_MODULES).items() for m in mods]


def wanted_backends(name: str) -> set[str]:
    """The optional backends a name belongs to (``RayReplayBuffer`` -> ``{"ray"}``)."""
    return {b for b, pattern in BACKENDS.items() if pattern.search(name)}


# explain.py sets this in a fresh interpreter only: hiding a backend makes torchrl record
# it as absent for the rest of the process, which a test process must not inherit.
HIDE = False


@contextlib.contextmanager
def hide_backends(name: str):
    """Import with Ray/vLLM/SGLang hidden (``sys.modules[b] = None``: find_spec says absent)
    unless ``name`` lives with one of them or :data:`HIDE` is off."""
    hidden = [b for b in BACKENDS if HIDE and b not in wanted_backends(name) and b not in sys.modules]
    for b in hidden:
        sys.modules[b] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for b in hidden:
            if sys.modules.get(b, 0) is None:
                del sys.modules[b]


def _import(module: str):
    # torchrl's logger prints to stdout on some imports; stdout may carry a JSON report
    with hide_backends(module), contextlib.redirect_stdout(sys.stderr):
        return importlib.import_module(module)


def _walk(obj, attrs: list[str]):
    """``(object, owner)`` after ``getattr`` along ``attrs``; owner: the class a member was
    read from (None for a module-level name)."""
    owner = None
    for attr in attrs:
        owner = None if inspect_module(obj) else obj
        obj = inspect_getattr(obj, attr)
    return obj, owner


def inspect_module(obj) -> bool:
    return type(obj).__name__ == "module"


def inspect_getattr(obj, attr: str):
    """``getattr`` that returns the raw function/property of a class member, not a bound one."""
    if isinstance(obj, type):
        for klass in obj.__mro__:
            if attr in klass.__dict__:
                raw = klass.__dict__[attr]
                return raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
    return getattr(obj, attr)


def resolve(text: str) -> Found | NotFound:
    """Resolve a short name, dotted path or member. Raises :class:`BadName` on bad text.

    Only the module holding the name is imported. A dotted path outside torchrl and
    tensordict is not looked up (NotFound with a reason)."""
    name = check_name(text)
    if ":" in name:
        return resolve_user(name)
    parts = name.split(".")
    index = public_index()
    if parts[0] in ("torchrl", "tensordict"):
        for cut in range(len(parts), 0, -1):
            module = ".".join(parts[:cut])
            if _module_file(module) is None and cut > 1:
                continue
            try:
                mod = _import(module)
                obj, owner = _walk(mod, parts[cut:])
            except (ImportError, AttributeError):
                break
            top = parts[cut] if cut < len(parts) else ""
            head = getattr(mod, top, None) if top else None
            exported = tuple(m for m in index.get(top, ()) if head is not None and _same(m, top, head))
            return Found(name, name, obj, owner, exported or ((module,) if top else ()))
        return _not_found(name, "")
    if parts[0] in index:
        modules = index[parts[0]]
        try:
            mod = _import(modules[0])
            obj, owner = _walk(mod, parts)
        except AttributeError as err:
            return _not_found(name, str(err))
        except ImportError as err:
            return _not_found(name, f"importing {modules[0]} failed: {err}")
        return Found(name, f"{modules[0]}.{name}", obj, owner, modules)
    defining = defined_in_submodule(parts[0])
    if defining is not None:
        try:
            obj, owner = _walk(sys.modules[defining], parts)
        except AttributeError as err:
            return _not_found(name, str(err))
        return Found(name, f"{defining}.{name}", obj, owner, (defining,), public=False)
    return _not_found(name, "")


def defined_in_submodule(short: str) -> str | None:
    """The torchrl/tensordict module that defines the class or function ``short`` although
    no public module's ``__all__`` lists it (``ContinuousBox``, the type of
    ``Bounded(...).space``, is defined in ``torchrl.data.tensor_specs``, torchrl 0.14.1),
    else None. Imports the public modules, then reads the namespace of every
    ``torchrl.*``/``tensordict.*`` module they loaded; private ``_x`` names are not looked up."""
    if short.startswith("_"):
        return None
    for module in PUBLIC_MODULES + EXTRA_MODULES:
        try:
            _import(module)
        except Exception:  # noqa: BLE001  a module that fails to import here holds nothing to find
            continue
    loaded = sorted(m for m, mod in list(sys.modules.items())
                    if mod is not None and m.split(".")[0] in ("torchrl", "tensordict"))
    for module in loaded:
        obj = vars(sys.modules[module]).get(short)
        if (isinstance(obj, type) or callable(obj) and hasattr(obj, "__code__")) and getattr(obj, "__name__", "") == short:
            home = getattr(obj, "__module__", "") or module
            if home.split(".")[0] in ("torchrl", "tensordict") and home in sys.modules:
                return home
    return None


def _same(module: str, attr: str, obj) -> bool:
    """True when ``module`` (if imported) exports the very object ``obj`` as ``attr``."""
    return sys.modules.get(module) is None or getattr(sys.modules[module], attr, None) is obj


def _not_found(name: str, reason: str) -> NotFound:
    return NotFound(name, closest(name), tuple(renames_for(name)), reason)


def closest(name: str, n: int = 5) -> tuple[str, ...]:
    """The public names closest to ``name`` (difflib), compared on the last dotted part."""
    index = public_index()
    parts = name.split(".")
    last = parts[-1]
    if len(parts) > 1 and parts[0] in index:  # a member of a known class: suggest members
        try:
            owner = getattr(_import(index[parts[0]][0]), parts[0])
            members = [m for m in dir(owner) if not m.startswith("_")]
            return tuple(f"{parts[0]}.{m}" for m in difflib.get_close_matches(last, members, n=n, cutoff=0.5))
        except (ImportError, AttributeError):
            pass
    hits = difflib.get_close_matches(last, list(index), n=n, cutoff=0.6)
    lowered = {k.lower(): k for k in index}
    if last.lower() in lowered and lowered[last.lower()] not in hits:
        hits.insert(0, lowered[last.lower()])
    return tuple(f"{index[h][0]}.{h}" for h in hits[:n])


def api_changes_path() -> Path:
    return Path(__file__).resolve().parents[2] / "sub-skills" / "development-and-testing" / "scripts" / "api_changes.json"


@functools.lru_cache(maxsize=None)
def api_changes() -> dict:
    """The bundle's rename table (``api_changes.json``); empty sections when it is absent."""
    import json

    try:
        data = json.loads(api_changes_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    return {k: data.get(k, []) for k in ("names", "keys", "kwargs", "deprecated")}


def _tail_matches(dotted: str, name: str) -> bool:
    return dotted == name or dotted.endswith("." + name) or dotted.rsplit(".", 1)[-1] == name.rsplit(".", 1)[-1]


def renames_for(name: str) -> list[dict]:
    """Rows of ``names`` and ``deprecated`` whose old name is ``name`` (short or dotted),
    each with its ``section``."""
    table = api_changes()
    return [
        {**row, "section": section}
        for section in ("names", "deprecated")
        for row in table[section]
        if _tail_matches(row.get("old", ""), name)
    ]
