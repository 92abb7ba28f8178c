"""How a child interpreter of the bundle finds the package: the one place, besides the entry
points, that puts ``src/`` on ``sys.path``.

A child started as ``python -c CODE ARGS`` (the auditor's child, :func:`child_args`) or a
spawned worker whose command line is prefixed with :func:`call` (the auditor's instrumented
workers, audit/workers.py) has run no entry point. ``src/`` holds only the ``torchrl_skill``
package, so adding it can never shadow a user's module; it still goes last, after everything
the user's script would see.
"""

from __future__ import annotations

from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2])


def call(module: str, expr: str) -> str:
    """Python source that puts ``src/`` last on ``sys.path`` (once), imports ``module`` and
    evaluates ``expr`` on it: ``call("torchrl_skill.audit.workers", "boot('/tmp/x')")``."""
    return (f"import sys; {SRC!r} in sys.path or sys.path.append({SRC!r}); "
            f"import {module} as _m; _m.{expr}; del _m")


def child_args(module: str) -> list[str]:
    """``["-c", CODE]``: ``python -c CODE ARGS`` runs ``module.main()`` with ``sys.argv[1:]`` =
    ARGS. The ``""`` entry ``-c`` puts first on ``sys.path`` (the working folder) is dropped, as
    ``python script.py`` would not have it: the child sees the user's folders alone, then ``src/``."""
    return ["-c", f"import sys; del sys.path[0]; {call(module, 'main()')}"]
