"""torchrl-skill's code: one package behind the scripts the skill text names.

The scripts users run (``scripts/*.py``, ``sub-skills/*/scripts/*.py``) are thin entry points:
each puts ``src/`` on ``sys.path`` once and runs the ``main`` of its body here. ``src/`` holds
only this package, so it never shadows a module of the user's project.

Layers, bottom up (a layer imports only the ones above it in this list):

- ``data``: the JSON data files (error index, report schema, stack lines, upstream index,
  API changes), each with its one path;
- ``report``: the report layer: ``base`` (exceptions, exit codes, evidence), ``cli`` (the
  shared parser), ``skill_report`` (checks declared as data, the report, ``standard_main``);
- ``stack``: the stack probe: installed versions, supported and verified lines
  (``probe``), release-line notes (``versions``), and check_torchrl_env.py's body;
- ``runtime``: running user code and processes: ``user_code`` (targets, time limits),
  ``worker_imports``, ``processes``, ``ray_local``, ``fork`` (a forked ``python ARGS``),
  ``boot`` (how a child interpreter finds this package), ``threads`` (torch's thread count
  pinned for a block), ``import_hook`` (a function run when a package is first imported);
- the instruments: ``explain`` (explain.py: names, errors, the error index), ``audit``
  (audit_run.py: the run-time auditor, its child, detectors and probe ladder), ``checks``
  (one sub-package per sub-skill with its scripts' bodies and helpers, and run_all_checks).
"""
