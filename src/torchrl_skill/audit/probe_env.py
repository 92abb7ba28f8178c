"""Probe dynamics for the ladder (child side): swap a leaf env's dynamics, keep its specs.

One job: give every leaf env the script builds (``GymEnv``, a custom ``EnvBase``, each
sub-env of a ``SerialEnv``; not ``TransformedEnv`` or batched envs, which drive their
leaves through ``_step``/``_reset``) the dynamics of one ladder rung, by setting the
instance's ``_step``/``_reset`` (torchrl 0.14.1 ``EnvBase.step`` calls ``self._step``,
``EnvBase.reset`` calls ``self._reset``; ``TransformedEnv._step`` and ``SerialEnv._step``
call their leaves' ``_step``). Specs, batch size, device, keys and the transforms the
script appends are untouched: the transforms see probe data.

A probe state is one of three points of each observation leaf (:meth:`ProbeSpace.encode`):
``0`` the centre, ``+1`` / ``-1`` half-way to the high / low bound on every element
(``±1`` on an unbounded element). Episodes end with ``terminated`` (and ``done``) set,
``truncated`` never. The rungs (the known answers are in ladder.py):

== ======================= ==================================================== =======
#  name                    observation and reward                                steps
== ======================= ==================================================== =======
1  constant-reward         state +1; reward 1                                    1
2  observation-reward      state ±1 at random; reward = the state (±1)           1
3  two-step                state -1 (A), then +1 (B); reward 0, then 1           2
4  action-reward           state +1; reward 1 at the best action (below)         1
5  action-observation      state ±1 at random; best action depends on it        1
== ======================= ==================================================== =======

Best action: continuous, ``mid - half/2`` on rung 4 and ``mid + s * half/2`` on rung 5
(``mid``, ``half``: the centre and half-width of the action spec, 0 and 1 where unbounded),
reward ``1 - mean(((a - best) / half) ** 2)``; discrete with ``n`` actions, index ``n - 1``
on rung 4, ``n - 1`` for state +1 and ``0`` for state -1 on rung 5, reward 1 for the best
action and 0 otherwise. Draws use a generator of the probe's own (seeded from the ladder
seed), never torch's global one the script seeds.
"""

from __future__ import annotations

import itertools

HORIZON = {1: 1, 2: 1, 3: 2, 4: 1, 5: 1}
UNBOUNDED = 1e6  # a bound this large counts as none
_COUNTER = itertools.count()


class ProbeUnsupported(Exception):
    """The env's specs cannot carry a probe (a reason for the ladder's exit 5)."""


def _bounds(spec, torch):
    """``(mid, half)`` tensors of a float spec's shape; a bound beyond ``UNBOUNDED`` (or none)
    counts as unbounded: mid 0, half 1."""
    space = getattr(spec, "space", None)
    low, high = getattr(space, "low", None), getattr(space, "high", None)
    shape = spec.shape
    if low is None or high is None:
        return torch.zeros(shape), torch.ones(shape)
    low, high = low.float().expand(shape), high.float().expand(shape)
    # Unbounded specs carry +-3.4e38 bounds (torchrl 0.14.1): half of their width overflows
    finite = (low.abs() < UNBOUNDED) & (high.abs() < UNBOUNDED)
    mid = torch.where(finite, (low + high) / 2, torch.zeros(shape))
    half = torch.where(finite, (high - low) / 2, torch.ones(shape))
    return mid, half


def _categorical_n(spec):
    n = getattr(getattr(spec, "space", None), "n", None)
    return int(n) if n is not None else None


class ProbeSpace:
    """What the probe needs from one leaf env's specs (read at its first reset, when a
    custom env has set them). Raises :class:`ProbeUnsupported` for what it cannot carry:
    more than one action, reward or done group, nested (multi-agent) keys, a discrete action
    spec other than ``OneHot``/``Categorical``."""

    def __init__(self, env):
        import torch

        self.torch = torch
        self.batch_size = env.batch_size
        self.device = env.device
        actions = list(env.full_action_spec.keys(True, True))
        if len(actions) != 1 or not isinstance(actions[0], str):
            raise ProbeUnsupported(f"{type(env).__name__} has action keys {actions}: the ladder probes one root action")
        self.action_key = actions[0]
        spec = env.full_action_spec[self.action_key]
        self.action_shape = spec.shape[len(self.batch_size):]
        kind = type(spec).__name__
        self.n_actions = None
        if spec.dtype.is_floating_point:
            self.mid, self.half = (t[(0,) * len(self.batch_size)] if len(self.batch_size) else t for t in _bounds(spec, torch))
        elif kind in ("OneHot", "OneHotDiscreteTensorSpec", "Categorical", "DiscreteTensorSpec") and _categorical_n(spec):
            self.n_actions = _categorical_n(spec)
            self.one_hot = kind.startswith("OneHot")
        else:
            raise ProbeUnsupported(f"{type(env).__name__}'s action spec is {kind}: the ladder probes continuous, OneHot or Categorical actions")
        rewards = list(env.reward_keys)
        dones = list(env.done_keys)
        if len(rewards) != 1 or not isinstance(rewards[0], str) or not all(isinstance(k, str) for k in dones):
            raise ProbeUnsupported(f"{type(env).__name__} has reward keys {rewards} and done keys {dones}: the ladder probes root keys")
        self.reward_key = rewards[0]
        self.reward_shape = env.full_reward_spec[self.reward_key].shape
        self.done_specs = {k: env.full_done_spec[k] for k in dones}
        self.obs_specs = {k: env.full_observation_spec[k] for k in env.full_observation_spec.keys(True, True)}
        if not self.obs_specs:
            raise ProbeUnsupported(f"{type(env).__name__} has no observation entry to carry a probe state")

    def encode(self, state):
        """Observation leaves for ``state`` (a ``[*batch]`` float tensor of 0, +1 or -1): the
        three points of each leaf are computed once, then picked per row."""
        torch = self.torch
        if not hasattr(self, "_points"):
            ones = torch.ones(self.batch_size)
            self._points = {v: self._encode(ones * v) for v in (-1.0, 0.0, 1.0)}
        out = {}
        for key, plus in self._points[1.0].items():
            s = state.reshape(*state.shape, *([1] * (plus.dim() - state.dim())))
            out[key] = torch.where(s > 0, plus, torch.where(s < 0, self._points[-1.0][key], self._points[0.0][key]))
        return out

    def _encode(self, state):
        torch = self.torch
        out = {}
        for key, spec in self.obs_specs.items():
            shape = spec.shape
            extra = shape[len(self.batch_size):]
            s = state.reshape(*state.shape, *([1] * len(extra)))
            if spec.dtype.is_floating_point:
                mid, half = _bounds(spec, torch)
                value = mid + s * half / 2
            elif _categorical_n(spec):
                n = _categorical_n(spec)
                index = ((s + 1) / 2 * (n - 1)).round().long()
                if type(spec).__name__.startswith("OneHot"):
                    value = torch.nn.functional.one_hot(index.squeeze(-1), n).to(spec.dtype)
                else:
                    value = index.to(spec.dtype).expand(shape)
            else:
                value = spec.zero().float() + 0 * s
            out[key] = value.expand(shape).to(spec.dtype).to(spec.device or self.device)
        return out

    def action_index(self, action):
        """``[*batch]`` long indices of discrete actions."""
        if self.one_hot:
            return action.argmax(-1)
        return action.reshape(*self.batch_size, -1)[..., 0].long() if len(self.batch_size) else action.reshape(-1)[0].long()

    def best_action(self, rung: int, state):
        """Rung 4/5's best action for ``state`` (``[*batch]``): continuous ``[*batch, *action_shape]``
        floats, discrete ``[*batch]`` indices."""
        torch = self.torch
        if self.n_actions is not None:
            if rung == 4:
                return torch.full(state.shape, self.n_actions - 1, dtype=torch.long)
            return torch.where(state > 0, self.n_actions - 1, 0).long()
        s = -torch.ones_like(state) if rung == 4 else state
        s = s.reshape(*s.shape, *([1] * len(self.action_shape)))
        return self.mid + s * self.half / 2

    def action_reward(self, rung: int, state, action):
        """Rung 4/5's reward ``[*batch]`` for ``action`` taken in ``state``."""
        best = self.best_action(rung, state)
        if self.n_actions is not None:
            return (self.action_index(action) == best).float()
        d = (action.float() - best) / self.half
        return 1 - d.pow(2).reshape(*state.shape, -1).mean(-1)


class ProbeDynamics:
    """The rung's dynamics for one leaf env, set as its ``_reset``/``_step``.

    ``force``: None, or a state (0, +1, -1) every row resets to: the judge reads the
    transformed observation of a known state through the script's own env."""

    def __init__(self, env, rung: int, seed: int):
        import torch

        self.env, self.rung = env, rung
        self.space = None
        self.gen = torch.Generator().manual_seed(seed * 1000 + next(_COUNTER))
        self.force = None
        self.steps = 0
        self.ends = 0
        self.last_action = self.last_index = self.last_reward = None

    def _ensure(self):
        if self.space is None:
            self.space = ProbeSpace(self.env)
            shape = self.space.batch_size
            self.t = self.space.torch.zeros(shape, dtype=self.space.torch.long)
            self.state = self.space.torch.zeros(shape)
        return self.space

    def _start_state(self, shape):
        torch = self.space.torch
        if self.force is not None:
            return torch.full(shape, float(self.force))
        if self.rung in (2, 5):
            return torch.randint(0, 2, shape, generator=self.gen).float() * 2 - 1
        return torch.full(shape, -1.0 if self.rung == 3 else 1.0)

    def _td(self, obs: dict, **entries):
        from tensordict import TensorDict

        return TensorDict({**obs, **entries}, batch_size=self.space.batch_size, device=self.env.device)

    def _dones(self, end):
        out = {}
        for key, spec in self.space.done_specs.items():
            value = end if key != "truncated" else self.space.torch.zeros_like(end)
            out[key] = value.reshape(spec.shape).to(spec.dtype)
        return out

    def reset(self, tensordict=None, **kwargs):
        space = self._ensure()
        torch = space.torch
        mask = tensordict.get("_reset", None) if tensordict is not None else None
        fresh = self._start_state(space.batch_size)
        if mask is None:
            rows = torch.ones(space.batch_size, dtype=torch.bool)
        else:
            rows = mask.reshape(*space.batch_size, -1).any(-1) if len(space.batch_size) else mask.reshape(-1).any()
        self.state = torch.where(rows, fresh, self.state)
        self.t = torch.where(rows, torch.zeros_like(self.t), self.t)
        return self._td(space.encode(self.state), **self._dones(torch.zeros(space.batch_size, dtype=torch.bool)))

    def step(self, tensordict):
        space = self._ensure()
        torch = space.torch
        self.t = self.t + 1
        rung, state = self.rung, self.state
        if rung == 1:
            reward = torch.ones(space.batch_size)
        elif rung == 2:
            reward = state.clone()
        elif rung == 3:
            reward = (self.t >= 2).float()
            self.state = torch.where(self.t >= 1, torch.ones_like(state), state)  # A -> B, and B stays B
        else:
            reward = space.action_reward(rung, state, tensordict.get(space.action_key))
        action = tensordict.get(space.action_key, None)
        self.last_action = action.detach().clone() if action is not None else None
        self.last_index = space.action_index(action) if action is not None and space.n_actions is not None else None
        self.last_reward = reward.detach().clone()
        end = self.t >= HORIZON[rung]
        self.steps += int(end.numel())
        self.ends += int(end.sum())
        reward = reward.reshape(*space.batch_size, *([1] * (len(space.reward_shape) - len(space.batch_size)))).expand(space.reward_shape)
        return self._td(space.encode(self.state), **{space.reward_key: reward.float()}, **self._dones(end))


def is_leaf(env) -> bool:
    """Whether ``env`` computes its own dynamics (not a ``TransformedEnv`` or batched env)."""
    from torchrl.envs import EnvBase, TransformedEnv
    from torchrl.envs.batched_envs import BatchedEnvBase

    return isinstance(env, EnvBase) and not isinstance(env, (TransformedEnv, BatchedEnvBase))


def attach(env, rung: int, seed: int) -> ProbeDynamics:
    """Give ``env`` the dynamics of ``rung`` (instance attributes; the class is untouched)."""
    dyn = ProbeDynamics(env, rung, seed)
    env._reset = dyn.reset
    env._step = dyn.step
    env._probe_dynamics = dyn
    return dyn
