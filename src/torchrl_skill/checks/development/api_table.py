"""Load and resolve rows of ``api_changes.json`` (the bundle's table of renamed/removed
TorchRL names, keys and keyword arguments).

Shared by ``scan_api_drift.py`` and the tests: ``load_table``, ``resolve``, ``exists`` and
``render_markdown`` are this module's testing seam (the tests check the table's rows and
the generated api-changes block through them). Imports torchrl only inside functions.
Facts in the table come from pytorch/rl history (tags v0.3.0 to v0.13.3) and were
checked against the installed torchrl 0.14.1.
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from pathlib import Path

from torchrl_skill import data

TABLE_PATH = data.API_CHANGES
_MISSING = object()


def load_table(path: Path | str = TABLE_PATH) -> dict:
    """Return the parsed table: ``{"names": [...], "keys": [...], "kwargs": [...], "deprecated": [...]}``.

    Raises ``FileNotFoundError`` / ``json.JSONDecodeError`` when the file is absent or broken.
    """
    return data.api_changes(path)


def resolve(dotted: str):
    """Resolve ``pkg.mod.Attr`` (or a module path) in the installed stack.

    Returns the object, or the sentinel :data:`_MISSING` when the module does not exist or
    lacks the attribute. Raises ``ImportError`` when the module exists but fails to import
    (an optional dependency is absent) or reading an attribute raises something other than
    AttributeError (a lazy class property), so callers can tell "gone" from "cannot check".
    """
    parts = dotted.split(".")
    # Longest importable module prefix, then attributes.
    for cut in range(len(parts), 0, -1):
        mod_name = ".".join(parts[:cut])
        try:
            spec = importlib.util.find_spec(mod_name)
        except (ImportError, ValueError):
            spec = None
        if spec is None:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                obj = importlib.import_module(mod_name)
        except ImportError:
            raise
        except Exception as err:  # the module's own import code failed: cannot check, not "gone"
            raise ImportError(f"importing {mod_name} raised {type(err).__name__}: {err}") from err
        for attr in parts[cut:]:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    obj = getattr(obj, attr)
            except AttributeError:
                return _MISSING
            except ImportError:
                raise
            except Exception as err:  # a lazy attribute that computes something (and failed here)
                raise ImportError(f"reading {attr} raised {type(err).__name__}: {str(err)[:100]}") from err
        return obj
    return _MISSING


def exists(dotted: str) -> bool:
    """True when :func:`resolve` finds ``dotted`` (a module import failure counts as False)."""
    try:
        return resolve(dotted) is not _MISSING
    except ImportError:
        return False


def version_phrase(row: dict) -> str:
    """Human text for a row's versions, e.g. ``deprecated 0.11.0, removed 0.13.0``."""
    dep, rem, chg = row.get("deprecated_in"), row.get("removed_in"), row.get("changed_in")
    status = row.get("status")
    if status == "raises":
        if dep and rem:
            return f"deprecated {dep}, raises since {rem}"
        return f"raises since {rem or dep}"
    if status == "deprecated":
        return f"deprecated {dep}, still works in the installed version"
    if dep and rem and dep != rem:
        return f"deprecated {dep}, removed {rem}"
    if rem:
        return f"removed {rem}"
    if chg:
        return f"default changed in {chg}" + (f", warned since {dep}" if dep and dep != chg else "")
    return "version unknown"


BEGIN_MARK = "<!-- BEGIN GENERATED from src/torchrl_skill/data/api_changes.json -->"
END_MARK = "<!-- END GENERATED -->"


def _old_cell(old: str, kind: str | None) -> str:
    # Docs may show a removed name in inline code only by its last component (the docs
    # test resolves any dotted torchrl.* span); a removed module path is plain text.
    if kind == "module":
        return f"{old} (module)"
    return f"`{old.rsplit('.', 1)[-1]}` ({old.rsplit('.', 1)[0]})"


def render_markdown(table: dict) -> str:
    """Markdown tables for the api-changes reference, between :data:`BEGIN_MARK` and :data:`END_MARK`.

    The reference embeds exactly this text; a test regenerates it and compares.
    """
    def v(x):
        return x or "-"

    out = [BEGIN_MARK, "", "### Removed or moved names", "",
           "| old (where it lived) | use instead | deprecated in | removed in |", "|---|---|---|---|"]
    for r in table["names"]:
        new = f"`{r['new']}`" if r.get("new") else "(none)"
        out.append(f"| {_old_cell(r['old'], r.get('kind'))} | {new} | {v(r.get('deprecated_in'))} | {v(r.get('removed_in'))} |")
    out += ["", "### Keys", "", "| old key | new key | default changed in | warned since |", "|---|---|---|---|"]
    for r in table["keys"]:
        out.append(f"| \"{r['old']}\" | \"{r['new']}\" | {v(r.get('changed_in'))} | {v(r.get('deprecated_in'))} |")
    out += ["", "### Keyword arguments", "",
            "| callable | old keyword | new keyword | deprecated in | removed in |", "|---|---|---|---|---|"]
    for r in table["kwargs"]:
        new = f"{r['new']}=" if r.get("new") else "(drop it)"
        gone = {"deprecated": "still accepted", "raises": f"raises since {r.get('removed_in')}"}.get(
            r.get("status"), v(r.get("removed_in")))
        out.append(f"| `{r['callable']}` | {r['old']}= | {new} | {v(r.get('deprecated_in') or r.get('changed_in'))} "
                   f"| {gone} |")
    out += ["", "### Deprecated but still importable", "",
            "| name | use instead | deprecated in | behaviour in the installed version |", "|---|---|---|---|"]
    for r in table["deprecated"]:
        beh = "constructing it raises RuntimeError" if r.get("status") == "raises" else "works, warns"
        out.append(f"| `{r['old']}` | `{r['new']}` | {v(r.get('deprecated_in'))} | {beh} |")
    out += ["", END_MARK]
    return "\n".join(out)
