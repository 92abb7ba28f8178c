"""The bundle's data files, one path each: every reader takes its file from here.

- ``error_index.json``: the troubleshooting entries (read by ``torchrl_skill.explain.error_index.load``;
  its shape is ``error_index.schema.json``);
- ``report.schema.json``: the JSON report every script prints (``torchrl_skill.report.skill_report``);
- ``stack_lines.json``: the torch releases each torchrl line's extension loads with, written by
  ``benchmarks/version_matrix.py`` (read by ``torchrl_skill.stack.probe.stack_lines``);
- ``upstream_index.json``: facts of pytorch/rl's history, written by ``benchmarks/build_fix_index.py``
  (read by ``torchrl_skill.stack.versions.upstream``);
- ``api_changes.json``: renamed and removed TorchRL names (read by
  ``torchrl_skill.checks.development.api_table.load_table``).
"""

from pathlib import Path

DATA = Path(__file__).resolve().parent
ERROR_INDEX = DATA / "error_index.json"
REPORT_SCHEMA = DATA / "report.schema.json"
STACK_LINES = DATA / "stack_lines.json"
UPSTREAM_INDEX = DATA / "upstream_index.json"
API_CHANGES = DATA / "api_changes.json"
