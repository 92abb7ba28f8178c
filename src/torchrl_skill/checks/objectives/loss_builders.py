"""Tiny-module builders for every loss class ``torchrl.objectives`` exports (torchrl 0.14.1).

Private helper of ``inspect_loss_keys.py``, ``smoke_training_step.py`` and
``check_loss_wiring.py`` (not a check script), and the tests' documented testing seam
(they build independent forward passes with :func:`build` and :func:`forward_batch`).
Every builder constructs the real loss class with the smallest modules that satisfy its
constructor, so that the key report comes from the installed code, not from a docstring.

Conventions (all sizes fixed, all CPU):
- observation ``"observation"`` [*B, 3] float; continuous action ``"action"`` [*B, 1] in
  [-1, 1]; discrete action ``"action"`` one-hot [*B, 2].
- ``make_batch(kind, n)`` returns a TensorDict with batch [n] holding what a collector
  would write for that kind (``("next", "reward")`` [n, 1], ``done``/``terminated`` bool
  [n, 1]).
Sources: torchrl/objectives/*.py, torchrl/modules/tensordict_module/actors.py (0.14.1).
"""

from __future__ import annotations


def fmt_key(key) -> str:
    """Nested key -> dotted string: ("next", ("agents", "obs")) -> "next.agents.obs"."""
    return ".".join(fmt_key(k) for k in key) if isinstance(key, tuple) else str(key)


OBS, ACT, NACT = 3, 1, 2


def _torch():
    import torch

    return torch


def continuous_actor():
    """ProbabilisticActor: "observation" [*B,3] -> "loc","scale" -> TanhNormal "action" [*B,1],
    writing ``"action_log_prob"`` (return_log_prob=True)."""
    torch = _torch()
    from tensordict.nn import NormalParamExtractor, TensorDictModule
    from torchrl.data import Bounded
    from torchrl.modules import ProbabilisticActor, TanhNormal

    net = torch.nn.Sequential(torch.nn.Linear(OBS, 2 * ACT), NormalParamExtractor())
    return ProbabilisticActor(
        TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        return_log_prob=True,
        spec=Bounded(-1.0, 1.0, (ACT,)),
    )


def discrete_actor():
    """ProbabilisticActor over OneHotCategorical: "observation" -> "logits" -> one-hot "action" [*B,2]."""
    torch = _torch()
    from tensordict.nn import TensorDictModule
    from torchrl.data import OneHot
    from torchrl.modules import OneHotCategorical, ProbabilisticActor

    return ProbabilisticActor(
        TensorDictModule(torch.nn.Linear(OBS, NACT), in_keys=["observation"], out_keys=["logits"]),
        in_keys=["logits"],
        distribution_class=OneHotCategorical,
        return_log_prob=True,
        spec=OneHot(NACT),
    )


def deterministic_actor():
    """Actor: "observation" [*B,3] -> tanh -> "action" [*B,1]."""
    torch = _torch()
    from torchrl.data import Bounded
    from torchrl.modules import Actor

    net = torch.nn.Sequential(torch.nn.Linear(OBS, ACT), torch.nn.Tanh())
    return Actor(net, in_keys=["observation"], spec=Bounded(-1.0, 1.0, (ACT,)))



def state_value(out_key="state_value"):
    """ValueOperator: "observation" -> OUT_KEY [*B,1]."""
    torch = _torch()
    from torchrl.modules import ValueOperator

    return ValueOperator(torch.nn.Linear(OBS, 1), in_keys=["observation"], out_keys=[out_key])


def _qsa_module():
    torch = _torch()

    class QSA(torch.nn.Module):
        """Q(s, a): cat(observation, action) -> [*B, 1]."""

        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(OBS + ACT, 1)

        def forward(self, observation, action):
            return self.linear(torch.cat([observation, action], -1))

    return QSA()


def qsa_value():
    """ValueOperator: ("observation", "action") -> "state_action_value" [*B,1]."""
    from torchrl.modules import ValueOperator

    return ValueOperator(_qsa_module(), in_keys=["observation", "action"])


def q_actor():
    """QValueActor: "observation" -> "action_value" [*B,2] -> one-hot "action" (+ "chosen_action_value")."""
    torch = _torch()
    from torchrl.data import OneHot
    from torchrl.modules import QValueActor

    return QValueActor(torch.nn.Linear(OBS, NACT), in_keys=["observation"], spec=OneHot(NACT))


def action_value_module(out_key="action_value"):
    """TensorDictModule: "observation" -> OUT_KEY [*B,2] (discrete critics).

    DiscreteSACLoss reads ``"action_value"``; DiscreteIQLLoss reads ``"state_action_value"``
    (tensor_keys defaults, torchrl/objectives/sac.py and iql.py, 0.14.1)."""
    torch = _torch()
    from tensordict.nn import TensorDictModule

    return TensorDictModule(torch.nn.Linear(OBS, NACT), in_keys=["observation"], out_keys=[out_key])


def make_batch(kind: str, n: int = 8, seed: int = 0):
    """A collector-shaped TensorDict, batch [n]: one trajectory (``("next", "observation")``
    at step t is ``"observation"`` at t+1) that ends with ``done`` at the last step.

    kind: ``"continuous"`` (action [n,1] in [-1,1], with "action_log_prob" from
    ``continuous_actor``-like noise) or ``"discrete"`` (one-hot action [n,2]).
    """
    torch = _torch()
    from tensordict import TensorDict

    g = torch.Generator().manual_seed(seed)
    if kind == "continuous":
        action = torch.rand(n, ACT, generator=g) * 1.8 - 0.9
    else:
        action = torch.nn.functional.one_hot(torch.randint(0, NACT, (n,), generator=g), NACT)
    done = torch.zeros(n, 1, dtype=torch.bool)
    done[-1] = True
    states = torch.randn(n + 1, OBS, generator=g)  # one trajectory: step t+1 starts where t ended
    return TensorDict(
        {
            "observation": states[:-1],
            "action": action,
            "action_log_prob": torch.randn(n, generator=g) * 0.1 - 1.0,
            "next": {
                "observation": states[1:],
                "reward": torch.randn(n, 1, generator=g),
                "done": done.clone(),
                "terminated": done.clone(),
            },
        },
        batch_size=[n],
    )


def bounded_action_spec():
    """Bounded(-1, 1, (1,)): the action spec of the continuous builders (SAC-family losses need one)."""
    from torchrl.data import Bounded

    return Bounded(-1.0, 1.0, (ACT,))


def _dist_dqn():
    torch = _torch()
    from torchrl.data import OneHot
    from torchrl.modules import DistributionalQValueActor

    atoms = 5

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(OBS, atoms * NACT)

        def forward(self, x):
            return self.linear(x).view(*x.shape[:-1], atoms, NACT).log_softmax(-2)

    return DistributionalQValueActor(
        Net(), in_keys=["observation"], spec=OneHot(NACT), support=torch.linspace(-1, 1, atoms)
    )


def _qmixer():
    torch = _torch()
    from tensordict.nn import TensorDictModule
    from torchrl.modules import QMixer
    from torchrl.objectives import QMixerLoss

    n_agents = 2
    local = TensorDictModule(torch.nn.Linear(OBS, NACT), in_keys=[("agents", "observation")], out_keys=[("agents", "action_value")])
    from torchrl.modules import QValueModule
    from tensordict.nn import TensorDictSequential
    qv = QValueModule(
        action_value_key=("agents", "action_value"),
        out_keys=[("agents", "action"), ("agents", "action_value"), ("agents", "chosen_action_value")],
        action_space="one-hot",
    )
    local_q = TensorDictSequential(local, qv)
    mixer = TensorDictModule(
        QMixer(state_shape=(OBS,), mixing_embed_dim=4, n_agents=n_agents, device="cpu"),
        in_keys=[("agents", "chosen_action_value"), "state"],
        out_keys=["chosen_action_value"],
    )
    return QMixerLoss(local_q, mixer, action_space="one-hot")


def _gail():
    torch = _torch()
    from tensordict.nn import TensorDictModule
    from torchrl.objectives import GAILLoss

    class Disc(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(OBS + ACT, 1)

        def forward(self, obs, act):
            return torch.sigmoid(self.linear(torch.cat([obs, act], -1)))

    return GAILLoss(TensorDictModule(Disc(), in_keys=["observation", "action"], out_keys=["d_logits"]))


def _rnd():
    torch = _torch()
    from tensordict.nn import TensorDictModule
    from torchrl.objectives import RNDLoss

    def net():
        return TensorDictModule(torch.nn.Linear(OBS, 4), in_keys=["observation"], out_keys=["embedding"])

    return RNDLoss(net(), net())


def _multiagent(loss):
    """IPPO/MAPPO normalise advantages excluding dim -2 (the agent dim): their batch is
    [time, agents], so GAE must run along time_dim=0 (torchrl/objectives/multiagent, 0.14.1)."""
    from torchrl.objectives import ValueEstimators

    loss.make_value_estimator(ValueEstimators.GAE, gamma=0.9, lmbda=0.95, time_dim=0)
    return loss


def _builders():
    """name -> (zero-arg constructor, batch kind or None). Kind None: no forward pass here."""
    import torchrl.objectives as objectives

    return {
        "PPOLoss": (lambda a: objectives.PPOLoss(a, state_value()), "onpolicy"),
        "ClipPPOLoss": (lambda a: objectives.ClipPPOLoss(a, state_value()), "onpolicy"),
        "KLPENPPOLoss": (lambda a: objectives.KLPENPPOLoss(a, state_value()), "onpolicy"),
        "IPPOLoss": (lambda a: _multiagent(objectives.IPPOLoss(a, state_value())), "onpolicy-agents"),
        "MAPPOLoss": (lambda a: _multiagent(objectives.MAPPOLoss(a, state_value())), "onpolicy-agents"),
        "A2CLoss": (lambda a: objectives.A2CLoss(a, state_value()), "onpolicy"),
        "ReinforceLoss": (lambda a: objectives.ReinforceLoss(a, state_value()), "onpolicy"),
        "SACLoss": (lambda: objectives.SACLoss(continuous_actor(), qsa_value(), action_spec=bounded_action_spec()), "continuous"),
        "DiscreteSACLoss": (
            lambda: objectives.DiscreteSACLoss(discrete_actor(), action_value_module(), num_actions=NACT, action_space="one-hot"),
            "discrete",
        ),
        "REDQLoss": (lambda: objectives.REDQLoss(continuous_actor(), qsa_value(), action_spec=bounded_action_spec()), "continuous"),
        "CrossQLoss": (lambda: objectives.CrossQLoss(continuous_actor(), qsa_value(), action_spec=bounded_action_spec()), "continuous"),
        "TQCLoss": (lambda: objectives.TQCLoss(continuous_actor(), qsa_value(), action_spec=bounded_action_spec()), None),
        "CQLLoss": (lambda: objectives.CQLLoss(continuous_actor(), qsa_value(), action_spec=bounded_action_spec()), "continuous"),
        "DiscreteCQLLoss": (lambda: objectives.DiscreteCQLLoss(q_actor(), action_space="one-hot"), "discrete"),
        "IQLLoss": (lambda: objectives.IQLLoss(continuous_actor(), qsa_value(), state_value()), "continuous"),
        "DiscreteIQLLoss": (
            lambda: objectives.DiscreteIQLLoss(discrete_actor(), action_value_module("state_action_value"), state_value(), action_space="one-hot"),
            "discrete",
        ),
        "DDPGLoss": (lambda: objectives.DDPGLoss(deterministic_actor(), qsa_value()), "continuous"),
        "TD3Loss": (lambda: objectives.TD3Loss(deterministic_actor(), qsa_value(), action_spec=bounded_action_spec()), "continuous"),
        "TD3BCLoss": (lambda: objectives.TD3BCLoss(deterministic_actor(), qsa_value(), action_spec=bounded_action_spec()), "continuous"),
        "DQNLoss": (lambda: objectives.DQNLoss(q_actor(), action_space="one-hot"), "discrete"),
        "DistributionalDQNLoss": (lambda: objectives.DistributionalDQNLoss(_dist_dqn(), gamma=0.9), "discrete"),
        "QMixerLoss": (_qmixer, None),
        "BCLoss": (lambda: objectives.BCLoss(continuous_actor()), "continuous"),
        "GAILLoss": (_gail, None),
        "RNDLoss": (_rnd, None),
        "ExponentialQuadraticCost": (lambda: objectives.ExponentialQuadraticCost(), None),
    }


def exported_loss_names() -> list:
    """Every public LossModule subclass in ``torchrl.objectives.__all__`` (sorted)."""
    import inspect

    import torchrl.objectives as objectives

    names = []
    for name in getattr(objectives, "__all__", dir(objectives)):
        obj = getattr(objectives, name, None)
        if inspect.isclass(obj) and issubclass(obj, objectives.LossModule) and obj is not objectives.LossModule:
            names.append(name)
    return sorted(names)


def build(name: str):
    """Construct loss ``name`` with tiny modules. Returns ``(loss, batch_kind, actor)``.

    ``batch_kind``: ``"continuous"``, ``"discrete"``, ``"onpolicy"`` (continuous batch that
    must first be passed through ``actor`` so it carries ``"action_log_prob"``, ``"loc"``,
    ``"scale"`` as a collector would write them), ``"onpolicy-agents"`` (the same, batch
    [time, agents]) or None (no forward pass here).

    Raises KeyError when no tiny builder exists for ``name`` (world-model and
    sequence-model losses need whole model stacks), and whatever the constructor raises.
    """
    import torch

    torch.manual_seed(0)
    ctor, kind = _builders()[name]
    if kind in ("onpolicy", "onpolicy-agents"):
        actor = continuous_actor()
        return ctor(actor), kind, actor
    return ctor(), kind, None


def forward_batch(kind: str, actor=None, n: int = 8, seed: int = 0):
    """The batch a real forward pass of a loss built by :func:`build` consumes."""
    import torch

    batch = make_batch("discrete" if kind == "discrete" else "continuous", n=n, seed=seed)
    if kind == "onpolicy-agents":  # [time, agents] = [n // 2, 2]
        batch = batch.reshape(n // 2, 2)
    if kind in ("onpolicy", "onpolicy-agents"):
        del batch["action_log_prob"]
        with torch.no_grad():
            actor(batch)
    return batch


def has_builder(name: str) -> bool:
    return name in _builders()
