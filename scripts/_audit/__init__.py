"""The run-time auditor's private package (scripts/audit_run.py is its command).

Two halves that never import each other's heavy parts:

- the child (``child.py``, run in a fresh interpreter): ``probe.Hub`` holds what is seen,
  ``patches.install`` wraps torchrl and torch entry points so that each call reports to the
  hub, and each detector module's ``install(hub)`` subscribes to the events it needs and
  keeps a small JSON summary; the target runs unmodified with ``runpy``;
- the parent (``runner.py``): starts the child in its own process group, stops it at the
  budget, reads the summaries and hands them to each detector's ``judge(obs)``.

``DETECTORS`` lists the detector modules in report order; each one has ``NAME`` (its report
row), ``install(hub)`` (child side; imports torch inside) and ``judge(obs)`` (parent side;
returns the pass detail or raises ``skill_report.CheckFailed``/``CheckSkipped``).
"""

DETECTORS = [
    "d_target_network",
    "d_optimizer_coverage",
    "d_exploration",
    "d_transforms",
    "d_time_limit",
    "d_batched_layout",
    "d_vector_autoreset",
    "d_identical_workers",
    "d_prioritized_replay",
    "d_episode_stats",
]
