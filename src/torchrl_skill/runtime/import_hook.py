"""One import hook: run a function the moment a package is first imported.

The auditor instruments torchrl in its child process and in every spawned worker before any
TorchRL object can exist, and without paying for torchrl's import in a target that fails
before importing it (audit/child.py, audit/workers.py).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import sys
from typing import Callable, ContextManager


def when_imported(name: str, callback: Callable[[], None],
                  around: Callable[[], ContextManager] = contextlib.nullcontext) -> None:
    """Call ``callback()`` right after this interpreter executes the top-level module ``name``
    for the first time, both inside ``around()`` (the auditor pauses its watchdog there:
    importing torchrl is not the target hanging); at once when ``name`` is imported already
    (a .pth file or a launcher preloaded it: no import would come). The finder removes itself
    at its first use; an exception of ``callback`` propagates from that import."""
    if name in sys.modules:
        with around():
            callback()
        return

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname != name:
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(fullname)
            if spec is None or spec.loader is None:
                return spec
            run = spec.loader.exec_module

            def exec_module(module):
                with around():
                    run(module)
                    callback()

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, Finder())
