"""Uninstall distributions for one interpreter only, as `pip uninstall` would look to Python.

A hidden name is neither importable (``importlib.util.find_spec`` returns None, ``import``
raises the real ``ModuleNotFoundError: No module named 'x'``) nor listed by
``importlib.metadata``; nothing on disk changes. Module and distribution names are
assumed equal (gymnasium, hoptorch, requests, packaging).

    python tests/hide_distributions.py NAMES SCRIPT [ARGS...]    NAMES comma-separated
    python tests/hide_distributions.py NAMES -c CODE [ARGS...]

Tests reach it through the ``run_without`` fixture of tests/conftest.py; error triggers
call :func:`hide` before importing torchrl.
"""

from __future__ import annotations

import runpy
import sys
from importlib.machinery import PathFinder


def hide(names) -> None:
    """From now on, this interpreter behaves as if ``names`` were not installed."""
    hidden = {n.lower() for n in names}
    find_spec, find_dists = PathFinder.find_spec.__func__, PathFinder.find_distributions

    def spec(cls, name, path=None, target=None):
        return None if name.split(".")[0] in hidden else find_spec(cls, name, path, target)

    def dists(*args, **kwargs):
        return (d for d in find_dists(*args, **kwargs) if (d.metadata["Name"] or "").lower() not in hidden)

    PathFinder.find_spec = classmethod(spec)
    PathFinder.find_distributions = staticmethod(dists)
    for name in list(sys.modules):  # nothing imported before hide() may leak through
        if name.split(".")[0] in hidden:
            del sys.modules[name]


def main(argv: list[str]) -> None:
    hide(argv[0].split(","))
    if argv[1] == "-c":
        sys.argv = ["-c", *argv[3:]]
        exec(compile(argv[2], "<string>", "exec"), {"__name__": "__main__"})
    else:
        sys.argv = argv[1:]
        runpy.run_path(argv[1], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
