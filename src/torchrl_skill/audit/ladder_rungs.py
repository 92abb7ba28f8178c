"""The probe ladder's rungs as data: what each isolates, its known answer, its frame budget.

Shared by the child (ladder_child.py: the budget it stops at, the answers it judges) and
the parent (ladder.py: the rows). The dynamics are in probe_env.py. Budgets are collected
frames per rung, at least twice the largest count from which a known-good script of the
family kept passing, over the seeds measured (benchmarks/probe_budgets.json, its exceptions
listed there; tests/test_audit_probe_budgets.py holds ``FRAMES`` to it, and
benchmarks/probe_budgets.py writes the tables of references/probe-ladder.md from both); a
family missing from ``FRAMES`` gets ``DEFAULT_FRAMES``.
"""

from __future__ import annotations

RUNGS = {
    1: {"name": "constant-reward",
        "answer": "V(s) = 1 (one step, reward 1)",
        "isolates": "value/critic regression or the optimizer (a critic never trained or never stepped, a value target that "
                    "bootstraps past the end of an episode, a learning rate too small)",
        "rows": ["optimizer-coverage", "grad-norms", "value-range", "target-network"]},
    2: {"name": "observation-reward",
        "answer": "V(+) = 1, V(-) = -1 (one step, reward = the state)",
        "isolates": "the critic's view of the observation (the observation keys the critic reads, a transform that "
                    "blanks or mixes observations, the batch the critic is fitted on)",
        "rows": ["transforms", "info:observation-scale", "batched-layout"]},
    3: {"name": "two-step",
        "answer": "V(B) = 1, V(A) = gamma x V(B) and V(A) / V(B) >= 0.5 (reward 0 at A, then 1 at B, which terminates)",
        "isolates": "discounting, bootstrapping and done handling (gamma, the terminated/truncated flags the value "
                    "target reads, the next-state values, the target network)",
        "rows": ["time-limit", "target-network", "batched-layout", "value-range"]},
    4: {"name": "action-reward",
        "answer": "the policy's action earns reward 1 (best action: a quarter of the range from the low bound; discrete: the last)",
        "isolates": "the policy gradient, exploration and action scaling (the advantage's sign, the log-prob the "
                    "loss weighs, actions clipped or rescaled before the env, exploration noise)",
        "rows": ["policy-update", "action-bounds", "env-actions", "exploration", "policy-distribution"]},
    5: {"name": "action-observation",
        "answer": "the policy's action earns reward 1 in both states (best action: +/- a quarter of the range from the centre)",
        "isolates": "credit assignment from observation to action (the actor's view of the observation, the "
                    "advantage or Q-value per state, the actor's input keys)",
        "rows": ["policy-update", "batched-layout", "exploration"]},
}

# The family of a loss module, by its class name (torchrl 0.14.1 torchrl/objectives).
FAMILIES = {
    "ClipPPOLoss": "ppo", "PPOLoss": "ppo", "KLPENPPOLoss": "ppo", "ReinforceLoss": "ppo",
    # each frame used once (no epochs): at torchrl's MuJoCo A2C settings rung 5 settled at 18618 frames, past ppo's 10240
    "A2CLoss": "a2c",
    "SACLoss": "sac", "DiscreteSACLoss": "sac", "TD3Loss": "td3", "DDPGLoss": "ddpg",
    "DQNLoss": "dqn",
}

# Collected frames per rung and family (see the module docstring).
FRAMES = {
    "ppo": {1: 10240, 2: 12288, 3: 14336, 4: 14336, 5: 10240},
    "a2c": {1: 10240, 2: 12288, 3: 14336, 4: 14336, 5: 30720},
    "dqn": {1: 1600, 2: 1700, 3: 7200, 4: 1300, 5: 1600},
    "sac": {1: 1100, 2: 1500, 3: 2048, 4: 1200, 5: 1600},
    "td3": {1: 1100, 2: 1500, 3: 1700, 4: 2600, 5: 2600},
    "ddpg": {1: 1100, 2: 1500, 3: 1700, 4: 2600, 5: 2600},
}
DEFAULT_FRAMES = 14336

JUDGE_EVERY = 16  # interim judgments per budget (ladder_child.interim)
STABLE_JUDGMENTS = 3  # passed this many times in a row, steady: the rung passes early
VALUE_TOL = 0.25  # |V - known| on rewards of magnitude 1
ACTION_TOL = 0.25  # |a - best| / half-width, read as the reward the probe pays: >= 1 - ACTION_TOL**2
SAMPLED_BEST = 0.6  # a stochastic discrete actor: share of sampled actions at the best one
Q_GAP = 0.5  # a Q-network: Q(best) - Q(other), known gap 1
MIN_GAMMA = 0.5  # rung 3: V(A) / V(B) at least this: B's reward reaches A (gamma=0 makes it 0)


def family(loss_class: str) -> str:
    """``"ppo"``, ``"sac"``, ... for a loss class name; ``"other"`` for one not listed."""
    return FAMILIES.get(loss_class, "other")


def frames(fam: str, rung: int) -> int:
    """The rung's frame budget for a family."""
    return FRAMES.get(fam, {}).get(rung, DEFAULT_FRAMES)
