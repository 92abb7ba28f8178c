"""A small, correct custom TorchRL env: the known-good default of check_user_env.py.

``PointMassEnv`` moves a point on a line: observation ``"position"`` and ``"velocity"``
(float32, shape ``[*batch_size, 1]``), action ``"action"`` in [-1, 1] (shape
``[*batch_size, 1]``), reward ``-position**2`` (shape ``[*batch_size, 1]``), terminated
when ``|position| > 2``, truncated never (use ``StepCounter(max_steps=...)``).

It follows the EnvBase contract of torchrl 0.14.1 (torchrl/envs/common.py):
every spec is built with the env's ``batch_size`` as leading shape; ``_reset`` returns
observations (no reward); ``_step`` returns observations, reward and done flags, which
EnvBase.step writes under ``"next"``; ``_set_seed`` seeds the env's own generator.
"""

from __future__ import annotations


def _build_class():
    import torch
    from tensordict import TensorDict
    from torchrl.data import Bounded, Categorical, Composite, Unbounded
    from torchrl.envs import EnvBase

    class PointMassEnv(EnvBase):
        """1-D point mass. ``batch_size``: any shape, e.g. ``()`` or ``(4,)``."""

        def __init__(self, batch_size=(), device="cpu", seed: int = 0):
            super().__init__(batch_size=torch.Size(batch_size), device=device)
            bs = self.batch_size
            self.observation_spec = Composite(
                position=Unbounded(shape=(*bs, 1), dtype=torch.float32),
                velocity=Unbounded(shape=(*bs, 1), dtype=torch.float32),
                shape=bs,
            )
            self.action_spec = Bounded(low=-1.0, high=1.0, shape=(*bs, 1), dtype=torch.float32)
            self.reward_spec = Unbounded(shape=(*bs, 1), dtype=torch.float32)
            self.done_spec = Composite(
                done=Categorical(2, shape=(*bs, 1), dtype=torch.bool),
                terminated=Categorical(2, shape=(*bs, 1), dtype=torch.bool),
                truncated=Categorical(2, shape=(*bs, 1), dtype=torch.bool),
                shape=bs,
            )
            self._rng = torch.Generator()
            self._rng.manual_seed(seed)

        def _reset(self, tensordict):
            bs = self.batch_size
            position = (torch.rand((*bs, 1), generator=self._rng) - 0.5).to(self.device)
            return TensorDict(
                position=position,
                velocity=torch.zeros_like(position),
                batch_size=bs,
                device=self.device,
            )

        def _step(self, tensordict):
            velocity = tensordict["velocity"] + 0.1 * tensordict["action"]
            position = tensordict["position"] + 0.1 * velocity
            terminated = position.abs() > 2.0
            return TensorDict(
                position=position,
                velocity=velocity,
                reward=-position.pow(2),
                terminated=terminated,
                truncated=torch.zeros_like(terminated),
                done=terminated.clone(),
                batch_size=self.batch_size,
                device=self.device,
            )

        def _set_seed(self, seed):
            self._rng.manual_seed(int(seed) if seed is not None else 0)

    return PointMassEnv


def make_env(batch_size=()):
    """Return a ``PointMassEnv`` (an ``EnvBase``) with the given ``batch_size``."""
    return _build_class()(batch_size=batch_size)
