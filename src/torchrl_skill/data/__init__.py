"""The bundle's data files, one path each: every reader takes its file from here.

- ``error_index.json``: the troubleshooting entries (read by ``torchrl_skill.explain.error_index.load``);
  ``error_index.schema.json``: its JSON Schema, the one place its fields are written (validated
  with jsonschema by that loader and by tests/test_error_index.py);
- ``report.schema.json``: the JSON report every script prints (``torchrl_skill.report.skill_report``);
- ``stack_lines.json``: the torch releases each torchrl line's extension loads with, written by
  ``benchmarks/version_matrix.py`` (read by ``torchrl_skill.stack.probe.stack_lines``);
- ``upstream_index.json``: facts of pytorch/rl's history, written by ``benchmarks/build_fix_index.py``
  (read by ``torchrl_skill.stack.versions.upstream``);
- ``api_changes.json``: renamed and removed TorchRL names (read by
  ``torchrl_skill.checks.development.api_table.load_table``).
"""

import json
from pathlib import Path

DATA = Path(__file__).resolve().parent
ERROR_INDEX = DATA / "error_index.json"
ERROR_INDEX_SCHEMA = DATA / "error_index.schema.json"
REPORT_SCHEMA = DATA / "report.schema.json"
STACK_LINES = DATA / "stack_lines.json"
UPSTREAM_INDEX = DATA / "upstream_index.json"
API_CHANGES = DATA / "api_changes.json"

API_CHANGES_SECTIONS = ("names", "keys", "kwargs", "deprecated")


def api_changes(path: Path | str = API_CHANGES) -> dict:
    """The rename table (``api_changes.json``, or the file ``path``): its object with every
    section of :data:`API_CHANGES_SECTIONS` present (``[]`` when the file has none). The one
    reader of that file. Raises ``OSError`` when it cannot be read and ``ValueError``
    (``json.JSONDecodeError``) when it is no JSON object."""
    table = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(table, dict):
        raise ValueError(f"{path}: not a JSON object")
    return {**table, **{k: table.get(k) or [] for k in API_CHANGES_SECTIONS}}
