"""What a worker process would fail to import to unpickle an object a check sends it.

A spawned worker (multiprocessing spawn: ParallelEnv, multi-process collectors) starts a
fresh interpreter with the parent's sys.path and unpickles what it is sent; torchrl sends
env factories with cloudpickle, which pickles a module-level function or class by
reference (module and name) and a lambda or local function by value. A module loaded
under a name no folder on sys.path provides (``importlib.util.spec_from_file_location``
with a name of one's own) is in this process's ``sys.modules`` but not importable there.
:func:`unimportable_in_workers` reads the pickle without running it and names those
modules, so a checker can say so before it starts any worker.
"""

from __future__ import annotations

import importlib.machinery
import io
import pickle
import sys


class _Recorder(pickle.Unpickler):
    """Reads a pickle without running it: records each module a worker would import (every
    global, and cloudpickle's ``subimport`` of a module object) and builds inert stand-ins."""

    def __init__(self, data: bytes):
        super().__init__(io.BytesIO(data))
        self.needs: dict[str, set[str]] = {}

    def find_class(self, module, name):
        if name in ("subimport", "dynamic_subimport") and module.startswith("cloudpickle"):
            return lambda mod, *rest: self.needs.setdefault(mod, set()) and _Inert()
        self.needs.setdefault(module, set()).add(name)
        return type(name.rpartition(".")[2] or "x", (_Inert,), {})


class _Inert:
    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return _Inert()

    def __setstate__(self, state):
        pass

    def __setitem__(self, key, value):
        pass

    def append(self, value):
        pass

    def extend(self, values):
        pass


def _worker_finds(module: str) -> bool:
    top = module.partition(".")[0]
    return (top in sys.builtin_module_names or importlib.machinery.FrozenImporter.find_spec(top) is not None
            or importlib.machinery.PathFinder.find_spec(top, sys.path) is not None)


def unimportable_in_workers(obj) -> list[str]:
    """The modules a spawned worker (this sys.path, a fresh interpreter) could not import
    to unpickle ``obj`` as torchrl sends it (cloudpickle: a module-level function or class
    by reference, a lambda or local function by value): one line each, e.g. ``"module
    'helpers' (holds factory; loaded here from /src/x/impl.py, but no folder on sys.path
    provides that name)"``. Empty when every module is found, or when ``obj`` cannot be
    pickled (the worker start then reports that itself)."""
    import cloudpickle

    try:
        recorder = _Recorder(cloudpickle.dumps(obj))
        recorder.load()
    except Exception:  # not picklable, or a pickle the recorder cannot walk: the real start will say
        return []
    found = []
    for module, names in sorted(recorder.needs.items()):
        if module == "__main__" or _worker_finds(module):
            continue
        origin = getattr(sys.modules.get(module), "__file__", None)
        where = f"loaded here from {origin}" if origin else "not a module of any file"
        found.append(f"module {module!r} (holds {', '.join(sorted(names))}; {where}, but no folder on sys.path provides that name)")
    return found
