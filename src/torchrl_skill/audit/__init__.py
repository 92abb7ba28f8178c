"""The run-time auditor's private package (scripts/audit_run.py is its command).

Two halves that never import each other's heavy parts:

- the child (``child.py``, run in a fresh interpreter): ``probe.Hub`` holds what is seen,
  ``patches.install`` wraps torchrl and torch entry points so that each call reports to the
  hub, and each detector module's ``install(hub)`` subscribes to the events it needs and
  keeps a small JSON summary; the target runs unmodified with ``runpy``;
- the parent (``runner.py``): starts the child in its own process group, stops it at the
  budget, reads the summaries and hands them to each detector's ``judge(obs)``.

``DETECTORS`` lists the modules of the rows that can fail, in report order (``CAUSES``: the
cause detectors, ``INVARIANTS``: the invariants of a training loop, ``EFFECTS``: the effect monitors, ``LLM``: the LLM training-loop rows),
``INFO`` the modules of information rows (never a fault); each one has ``NAME`` (its report
row), ``install(hub)`` (child side; imports torch inside) and ``judge(obs)`` (parent side;
returns the pass detail or raises ``skill_report.CheckFailed``/``CheckSkipped``).
"""

# Report order: the cause detectors, the invariants, the effect monitors, the LLM rows, then the info rows
# (audit_run.CHECKS; the table of references/run-time-audit.md follows it).
CAUSES = [
    "d_training",  # first: whether anything was trained at all (exit 5 when not), and the early stop
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
    "d_env_seeding",
]
# Invariants of a correct training loop, judged from what the run does, for any loss and any
# loop: gradients, learning rate, the acting module, where the data comes from, the value
# estimator's flags and discount.
INVARIANTS = [
    "v_grad_flow",
    "v_learning_rate",
    "v_acting_module",
    "v_data_freshness",
    "v_transitions",
    "v_value_estimator",
]
# Effect monitors: a fault named by what it does (what the env receives, the policy's
# distribution, gradients, values, rewards), whatever its cause.
EFFECTS = [
    "e_env_actions",
    "e_action_bounds",
    "e_policy_distribution",
    "e_policy_update",
    "e_replay_rows",
    "e_non_finite",
    "e_grad_norms",
    "e_value_range",
    "e_reward_variety",
]
# LLM training loops (GRPOLoss/SFTLoss, TransformersWrapper, LLMCollector); each skips when none ran
LLM = ["l_ratio", "l_mask", "l_groups", "l_kl", "l_reward"]
DETECTORS = CAUSES + INVARIANTS + EFFECTS + LLM  # every row that can fail, in report order
INFO = ["i_update_to_data", "i_observation_scale"]  # information rows (never a fault), printed last


def cause_and_fix(entry_id: str, **values) -> str:
    """``"cause: ...; fix: ..."`` of an entry of src/torchrl_skill/data/error_index.json, in plain text (parent
    side), so that a row words a fault as the troubleshooting page and check_user_env.py do.
    Links are dropped; ``values`` replace placeholders of the fix (``N=20``:
    ``max_steps=N`` becomes ``max_steps=20``)."""
    import re

    from torchrl_skill.explain import error_index as _error_index

    entry = _error_index.by_id()[entry_id]
    cause, fix = entry.plain("cause").rstrip("."), re.sub(r" \(\[[^\]]*\]\([^)]*\)\)", "", entry.fix)
    fix = " ".join(fix.replace("**", "").split()).rstrip(".")
    for name, value in values.items():
        fix = re.sub(rf"\b{name}\b", str(value), fix)
    return f"cause: {cause}; fix: {fix}"
