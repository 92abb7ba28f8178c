"""Policy diagnostics shared by the modules-and-policies smoke scripts (private module).

Each ``find_*``/``audit_*`` function returns a list of findings (strings). An empty list
means the input is fine; each finding names the cause, the exact TorchRL fix and, where
one exists, the exact error text the fault produces later. Facts are read from the
installed torchrl 0.14.1 / tensordict 0.14.3 sources:
``torchrl/modules/tensordict_module/actors.py`` (QValueModule), ``rnn.py`` (LSTMModule,
GRUModule), ``torchrl/collectors/_single.py`` (auto_register_policy_transforms),
``torchrl/modules/utils/utils.py`` (get_primers_from_module) and
``tensordict/nn/probabilistic.py`` (ProbabilisticTensorDictModule).

No torch/torchrl import at module level: the check scripts must exit 2 (not crash)
when torchrl is missing.
"""

from __future__ import annotations

IS_INIT_ERROR = "KeyError: 'key \"is_init\" not found"
VAR_NUMS_ERROR = "ValueError: var_nums must be provided to the constructor for multi one-hot action spaces."
ACTION_SPACE_SPEC_ERROR = "TypeError: Using specs in action_space is deprecated"


def find_probabilistic_module(policy):
    """Return the first ``tensordict.nn.ProbabilisticTensorDictModule`` inside ``policy``.

    ``ProbabilisticActor`` is a sequence ``[param module, SafeProbabilisticModule]``;
    the second one holds ``return_log_prob``, ``log_prob_key`` and
    ``default_interaction_type``. Returns None when the policy has none (a plain
    ``Actor`` or ``TensorDictModule``).
    """
    from tensordict.nn import ProbabilisticTensorDictModule

    for sub in policy.modules():
        if isinstance(sub, ProbabilisticTensorDictModule):
            return sub
    return None


def audit_probabilistic_actor(actor, td, *, require_log_prob: bool = True) -> list[str]:
    """Findings about sampling and log-prob wiring of a stochastic policy.

    ``td``: an input TensorDict holding the actor's in_keys, batch ``[N]`` with N >= 2.
    Checks, on clones of ``td``: the policy holds a probabilistic module; two calls under
    ``set_exploration_type(ExplorationType.RANDOM)`` differ (else it cannot explore); two
    calls under ``ExplorationType.DETERMINISTIC`` agree; when ``require_log_prob`` the
    log-prob key (``action_log_prob`` for the ``action`` key in tensordict 0.14.3) is
    written with the action's batch shape. PPO/A2C-style losses read that key
    (``ClipPPOLoss.tensor_keys.sample_log_prob`` defaults to ``"action_log_prob"``).
    """
    import torch
    from torchrl.envs.utils import ExplorationType, set_exploration_type

    prob = find_probabilistic_module(actor)
    if prob is None:
        return [
            f"{type(actor).__name__} holds no ProbabilisticTensorDictModule: it is deterministic "
            "in every exploration mode and writes no log-prob; build it with "
            "ProbabilisticActor(module, in_keys=[...], distribution_class=..., return_log_prob=True)"
        ]
    findings = []
    action_key = prob.out_keys[0]
    with set_exploration_type(ExplorationType.RANDOM):
        torch.manual_seed(0)
        first = actor(td.clone())
        second = actor(td.clone())
    if torch.equal(first.get(action_key), second.get(action_key)):
        findings.append(
            f"two calls under set_exploration_type(ExplorationType.RANDOM) returned the same {action_key!r}: "
            "the distribution does not sample (zero scale, a Delta distribution or a mask leaving one choice)"
        )
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        det1 = actor(td.clone()).get(action_key)
        det2 = actor(td.clone()).get(action_key)
    if not torch.equal(det1, det2):
        findings.append(
            f"{action_key!r} differs between two calls under ExplorationType.DETERMINISTIC: evaluation is not reproducible"
        )
    if require_log_prob:
        lp_key = prob.log_prob_key
        if not prob.return_log_prob or lp_key not in first.keys(True):
            findings.append(
                f"no log-prob key {lp_key!r} in the actor output (return_log_prob={prob.return_log_prob}): "
                "pass return_log_prob=True to ProbabilisticActor; ClipPPOLoss reads "
                f"tensor_keys.sample_log_prob ({lp_key!r} here)"
            )
        elif first.get(lp_key).shape != first.get(action_key).shape[: first.batch_dims]:
            findings.append(
                f"log-prob {lp_key!r} has shape {list(first.get(lp_key).shape)}, expected the batch shape "
                f"{list(first.batch_size)}"
            )
    return findings


def explain_rollout_determinism(policy) -> list[str]:
    """Finding when a rollout of ``policy`` right now would NOT sample.

    Outside any ``set_exploration_type`` context ``exploration_type()`` is None and a
    ``ProbabilisticActor`` falls back to its ``default_interaction_type``, which is
    ``InteractionType.DETERMINISTIC`` by default (tensordict 0.14.3): ``env.rollout``
    then returns the mode/mean every step. A ``Collector`` sets
    ``exploration_type=ExplorationType.RANDOM`` by default, so the same policy explores
    there. Returns [] inside ``set_exploration_type(ExplorationType.RANDOM)`` or for a
    policy without a probabilistic module.
    """
    from torchrl.envs.utils import ExplorationType, exploration_type

    prob = find_probabilistic_module(policy)
    if prob is None:
        return []
    current = exploration_type()
    effective = current if current is not None else prob.default_interaction_type
    if effective == ExplorationType.RANDOM:
        return []
    where = "no set_exploration_type context is active" if current is None else f"exploration_type() is {current}"
    return [
        f"{where}, so this ProbabilisticActor uses {effective} (default_interaction_type="
        f"{prob.default_interaction_type}): env.rollout(...) will not explore; wrap it in "
        "`with set_exploration_type(ExplorationType.RANDOM):` (a Collector already uses RANDOM)"
    ]


def find_missing_recurrent_transforms(env, policy) -> list[str]:
    """Findings when ``env`` lacks the transforms a recurrent ``policy`` needs.

    ``LSTMModule``/``GRUModule`` read ``is_init`` (written by ``InitTracker``) and their
    hidden-state keys (created at reset by the primer from ``make_tensordict_primer()``;
    ``get_primers_from_module(policy)`` collects them). Reads ``env.full_observation_spec``
    and ``env.full_state_spec`` only (does not step the env). Without them a collector
    warns ``FutureWarning: ... missing transforms required by the policy`` and the first
    step raises ``KeyError: 'key "is_init" not found ...'``.
    """
    from torchrl.modules.utils import get_primers_from_module

    primer = get_primers_from_module(policy, warn=False)
    uses_is_init = any("is_init" in [k if isinstance(k, str) else k[-1] for k in getattr(m, "in_keys", [])] for m in policy.modules())
    if primer is None and not uses_is_init:
        return []
    keys = set()
    for spec in (env.full_observation_spec, env.full_state_spec):
        keys.update(k if isinstance(k, str) else k[-1] for k in spec.keys(True, True))
    findings = []
    fix = (
        "pass auto_register_policy_transforms=True to Collector, or "
        "env.append_transform(get_env_transforms_from_module(policy)) "
        "(InitTracker() plus the policy's make_tensordict_primer())"
    )
    if uses_is_init and "is_init" not in keys:
        findings.append(f"env has no 'is_init' entry (InitTracker missing): the policy will raise {IS_INIT_ERROR}; fix: {fix}")
    if primer is not None:
        wanted = [k if isinstance(k, str) else k[-1] for k in primer.primers.keys(True, True)]
        absent = [k for k in wanted if k not in keys]
        if absent:
            findings.append(f"env specs lack the hidden-state keys {absent} (no TensorDictPrimer); fix: {fix}")
    return findings


def find_qvalue_action_space_faults(policy) -> list[str]:
    """Findings for ``QValueModule``/``QValueActor`` with a multi-one-hot action space.

    ``QValueModule._mult_one_hot`` splits ``action_value`` with
    ``value.split(var_nums, dim=-1)`` (torchrl 0.14.1): ``var_nums=None`` raises
    ``ValueError: var_nums must be provided ...`` at the first forward (not at
    construction); an int is a chunk size, so it is right only when every component has
    that many choices; otherwise the greedy action silently has the wrong number of ones.
    ``torch.Tensor.split`` also accepts the list of sizes (``spec.nvec``), which is what a
    spec with unequal components needs (verified; the annotation says int).
    """
    from torchrl.modules import QValueModule

    findings = []
    for sub in policy.modules():
        if not isinstance(sub, QValueModule) or sub.action_space != "mult_one_hot":
            continue
        spec = sub.spec.get(sub.out_keys[0], None)
        nvec = list(getattr(spec, "nvec", []) or [])
        if sub.var_nums is None:
            hint = f"var_nums={nvec[0]}" if nvec and len(set(nvec)) == 1 else f"var_nums={nvec or '[sizes]'}"
            findings.append(f"QValueModule with a multi-one-hot action space and var_nums=None: first call raises {VAR_NUMS_ERROR} fix: pass {hint}")
            continue
        if nvec:
            width = sum(nvec)
            if isinstance(sub.var_nums, int):
                chunks = [sub.var_nums] * (width // sub.var_nums) + ([width % sub.var_nums] if width % sub.var_nums else [])
            else:
                chunks = list(sub.var_nums)
            if chunks != nvec:
                findings.append(
                    f"var_nums={sub.var_nums} splits action_value of width {width} into {chunks} but the spec's "
                    f"components are {nvec}: the greedy action gets {len(chunks)} ones instead of {len(nvec)}; "
                    f"fix: var_nums={nvec if len(set(nvec)) > 1 else nvec[0]}"
                )
    return findings


def find_log_prob_comparison_fault(event_log_prob, reference_log_prob) -> list[str]:
    """Finding when a per-sample log-prob is compared with an elementwise one.

    ``TanhNormal`` (and ``IndependentNormal``) treat the last dim as an event dim: for
    ``loc`` of shape ``[N, 1]``, ``log_prob(x)`` is ``[N]``. ``torch.distributions.Normal``
    is elementwise: ``[N, 1]``. Subtracting them broadcasts to ``[N, N]`` without error.
    """
    a, b = tuple(event_log_prob.shape), tuple(reference_log_prob.shape)
    if a == b:
        return []
    return [
        f"log-prob shapes differ: {list(a)} vs {list(b)} (a direct comparison broadcasts to a wrong shape); "
        "the last dim of TanhNormal is an event dim: sum the elementwise reference over dim -1, e.g. "
        "(Normal(loc, scale).log_prob(atanh(x)) - log1p(-x**2)).sum(-1), or wrap it in "
        "torch.distributions.Independent(..., 1)"
    ]


def hidden_state_trace(data, key: str):
    """Summarise how hidden state ``key`` travels through collected ``data`` (batch [T]).

    Returns ``(carried, changed, resets)``: ``carried`` is True when ``data[key][t+1]``
    equals ``data["next", key][t]`` for every step inside one trajectory (per
    ``("collector", "traj_ids")``); ``changed`` counts in-trajectory steps whose input
    hidden state differs from the previous step's; ``resets`` counts steps where
    ``is_init`` is True and the input hidden state is all zeros.
    """
    import torch

    h = data.get(key)
    h_next = data.get(("next", key))
    traj = data.get(("collector", "traj_ids"))
    same = traj[1:] == traj[:-1]
    carried = bool(torch.equal(h[1:][same], h_next[:-1][same]))
    diff = (h[1:] - h[:-1]).flatten(1).abs().amax(-1) > 0
    changed = int((diff & same).sum())
    is_init = data.get("is_init").reshape(-1)
    zero = h.flatten(1).abs().amax(-1) == 0
    resets = int((is_init & zero).sum())
    return carried, changed, resets
