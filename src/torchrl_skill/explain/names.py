"""Finding a TorchRL/TensorDict name for ``scripts/explain.py``: the public names of every
public module of the installed library (``index.py``: read from source, nothing
imported), and the import of only the module that holds the asked name. A name whose
module cannot be imported because an optional dependency is absent is :class:`NeedsBackend`
("needs hydra-core"), never "not in torchrl".

Forms accepted: a short name (``ClipPPOLoss``), a dotted path
(``torchrl.envs.TransformedEnv``) and a member (``ReplayBuffer.extend``,
``torchrl.data.ReplayBuffer.extend``). Optional backends (Ray, vLLM, SGLang) are hidden
while importing unless the name lives with them (:func:`hide_backends`).
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from torchrl_skill import data

from .index import PRIMARY, SECONDARY, declares_all, full_index, module_file, primary_index, static_all

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
    public: bool = True  # False: no module's __all__ lists it (defined in a module without __all__, or a private one)


@dataclass(frozen=True)
class NotFound:
    """A name the installed library does not have: the closest public names and the
    bundle's rename rows for it."""

    asked: str
    closest: tuple[str, ...]
    renames: tuple[dict, ...]
    reason: str = ""


@dataclass(frozen=True)
class NeedsBackend:
    """A public name whose module does not import here. ``missing``: the top-level module
    the import could not find (``hydra``), None when the import failed for another reason;
    ``dist``: the distribution to install for it (torchrl's optional extras name
    ``hydra-core`` for ``hydra``); ``message``: the first line of the ImportError."""

    asked: str
    module: str
    missing: str | None
    dist: str | None
    message: str

    @property
    def installed(self) -> bool:
        """False when the missing module is absent from this environment (an optional
        backend: "needs X"); True when it is there and the import failed anyway."""
        return self.missing is None or importlib.util.find_spec(self.missing) is not None

    def line(self) -> str:
        if not self.installed:
            return (f"{self.asked}: in {self.module}, which needs the optional {self.missing} "
                    f"(not installed here: pip install {self.dist or self.missing}); {self.message}")
        return f"{self.asked}: in {self.module}, whose import fails here: {self.message}"


def check_name(text: str) -> str:
    """``text`` stripped, or :class:`BadName` when it is empty or not an identifier/dotted
    path. ``file.py:Name`` / ``module:Name`` (user code) is checked by ``_user_code``."""
    name = (text or "").strip()
    if not name:
        raise BadName("empty name")
    if ":" in name:
        from torchrl_skill.runtime import user_code as _user_code

        _user_code.parse_target(name, form="path/to/file.py:ClassName")  # exits 2 on a bad target
        return name
    if not NAME_RE.fullmatch(name):
        raise BadName(f"{name!r} is not a Python identifier or dotted path")
    return name


def resolve_user(spec: str) -> Found:
    """A class or function of the user's code (``my_transforms.py:AddHundred``), imported
    with ``_user_code`` (exit 2 when it cannot be imported)."""
    from torchrl_skill.runtime import user_code as _user_code

    with contextlib.redirect_stdout(sys.stderr):
        obj = _user_code.load_attr(_user_code.parse_target(spec, form="path/to/file.py:ClassName"))
    return Found(spec, spec, obj, None, ())


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


def _import(module: str, asked: str = ""):
    # torchrl's logger prints to stdout on some imports; stdout may carry a JSON report
    try:
        with hide_backends(f"{module}.{asked}"), contextlib.redirect_stdout(sys.stderr):
            return importlib.import_module(module)
    except ImportError:
        if not HIDE:
            raise
    # a module that imports a hidden backend unconditionally: import it with the backend
    with contextlib.redirect_stdout(sys.stderr):
        return importlib.import_module(module)


def needs_backend(asked: str, module: str, err: ImportError) -> NeedsBackend:
    """What an ImportError of ``module`` says is missing: the name of the first
    ModuleNotFoundError along its cause/context chain (torchrl re-raises ``No module named
    'hydra'`` as its own ImportError), mapped to its distribution by torchrl's extras."""
    seen, missing = err, None
    while seen is not None and missing is None:
        if isinstance(seen, ModuleNotFoundError) and seen.name:
            missing = seen.name.split(".")[0]
        seen = seen.__cause__ or seen.__context__
    from .facts import dist_of

    message = (str(err).strip().splitlines() or [type(err).__name__])[0][:300]
    return NeedsBackend(asked, module, missing, dist_of(missing) if missing else None, message)


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


def resolve(text: str) -> Found | NotFound | NeedsBackend:
    """Resolve a short name, dotted path or member. Raises :class:`BadName` on bad text.

    Only the module holding the name is imported: a short name is looked up in the
    primary modules' ``__all__`` first, then in every public module (``index.py``). A
    dotted path outside torchrl and tensordict is not looked up (NotFound)."""
    name = check_name(text)
    if ":" in name:
        return resolve_user(name)
    parts = name.split(".")
    if parts[0] in ("torchrl", "tensordict"):
        return _resolve_dotted(name, parts)
    modules = primary_index().get(parts[0]) or full_index().get(parts[0], ())
    needs, absent = None, ""
    for module in modules:
        try:
            mod = _import(module, parts[0])
        except ImportError as err:
            needs = needs or needs_backend(name, module, err)
            continue
        if not hasattr(mod, parts[0]):  # torchrl.modules.distributions.__all__ lists "distributions" (0.14.1)
            absent = absent or (f"{module}.__all__ lists {parts[0]}, but the module does not define it "
                                f"(so `from {module} import *` raises)" if declares_all(module) else f"{module} has no attribute {parts[0]}")
            continue
        try:
            obj, owner = _walk(mod, parts)
        except AttributeError as err:  # a member the class does not have
            return _not_found(name, str(err))
        return Found(name, f"{module}.{name}", obj, owner, tuple(modules), public=any(map(declares_all, modules)))
    if needs is not None:
        return needs
    if absent:
        return _not_found(name, absent)
    defining = defined_in_submodule(parts[0])
    if defining is not None:
        try:
            obj, owner = _walk(sys.modules[defining], parts)
        except AttributeError as err:
            return _not_found(name, str(err))
        return Found(name, f"{defining}.{name}", obj, owner, (defining,), public=False)
    return _not_found(name, "")


def _resolve_dotted(name: str, parts: list[str]) -> Found | NotFound | NeedsBackend:
    """``torchrl.x.y.Name[.member]``: the longest prefix that is a module, imported."""
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module_file(module) is None and cut > 1:
            continue
        try:
            mod = _import(module, parts[cut] if cut < len(parts) else "")
        except ImportError as err:
            return needs_backend(name, module, err)
        parent = sys.modules.get(".".join(parts[:cut - 1])) if cut == len(parts) > 1 else None
        if parent is not None and not inspect_module(getattr(parent, parts[-1], mod)):
            continue  # the package binds a function over its submodule's name (torchrl.envs.env_creator, tensordict.memmap)
        try:
            obj, owner = _walk(mod, parts[cut:])
        except AttributeError:
            break
        top = parts[cut] if cut < len(parts) else ""
        head = getattr(mod, top, None) if top else None
        listed = (primary_index().get(top, ()) or full_index().get(top, ())) if top else ()
        exported = tuple(m for m in listed if head is not None and _same(m, top, head)) or ((module,) if top else ())
        public = not top or any(declares_all(m) and top in static_all(m) for m in exported)
        return Found(name, name, obj, owner, exported, public=public)
    return _not_found(name, "")


def defined_in_submodule(short: str) -> str | None:
    """The torchrl/tensordict module that defines the class or function ``short`` although
    no public module's ``__all__`` lists it (``ContinuousBox``, the type of
    ``Bounded(...).space``, is defined in ``torchrl.data.tensor_specs``, torchrl 0.14.1),
    else None. Imports the public modules, then reads the namespace of every
    ``torchrl.*``/``tensordict.*`` module they loaded; private ``_x`` names are not looked up."""
    if short.startswith("_"):
        return None
    for module in PRIMARY + SECONDARY:
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
    """The public names closest to ``name`` (difflib), compared on the last dotted part,
    over every public module."""
    index = full_index()
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
    return data.API_CHANGES


def api_changes() -> dict:
    """The bundle's rename table (``api_changes.json``); empty sections when it is absent
    (``torchrl_skill.stack.versions.api_changes``)."""
    from torchrl_skill.stack import versions

    return versions.api_changes()


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
