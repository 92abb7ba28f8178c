"""The report layer: CLI conventions, the check runner, the report and its exit codes.

``base`` (exceptions, exit codes, evidence; imports nothing of the bundle), ``cli`` (the
parser every script shares) and ``skill_report`` on top, which the check scripts import as
``sr`` and which re-exports the pieces below it.
"""
