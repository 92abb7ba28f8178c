"""A small PPO run written against torchrl 0.14.1: the drift scanner's clean example and the
run audit_run.py audits by default, so it trains for real (8 optimizer steps on 4 batches).

Runs on CPU in seconds: python sub-skills/development-and-testing/assets/modern_example.py
"""

from __future__ import annotations

import torch
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn
from torchrl.collectors import Collector
from torchrl.data import Bounded, Composite, LazyTensorStorage, ReplayBuffer, Unbounded
from torchrl.envs import StepCounter, TransformedEnv
from torchrl.envs.libs.gym import GymEnv
from torchrl.envs.utils import ExplorationType
from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE


def make_env():
    return TransformedEnv(GymEnv("Pendulum-v1"), StepCounter(max_steps=20))


def main():
    torch.manual_seed(0)
    spec = Composite(
        observation=Unbounded(shape=(3,)),
        action=Bounded(low=-2.0, high=2.0, shape=(1,)),
    )
    net = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 2), NormalParamExtractor())
    actor = ProbabilisticActor(
        TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        spec=spec["action"],
        distribution_class=TanhNormal,
        # TanhNormal's own range is [-1, 1]: without the spec's bounds it uses half the torque
        distribution_kwargs={"low": spec["action"].space.low, "high": spec["action"].space.high},
        return_log_prob=True,
    )
    critic = ValueOperator(nn.Linear(3, 1), in_keys=["observation"])
    loss = ClipPPOLoss(actor, critic, entropy_coeff=0.01, critic_coeff=1.0)
    gae = GAE(gamma=0.99, lmbda=0.95, value_network=critic)
    optim = torch.optim.Adam(loss.parameters(), lr=3e-4)
    collector = Collector(
        make_env, actor, frames_per_batch=64, total_frames=256, exploration_type=ExplorationType.RANDOM
    )
    rb = ReplayBuffer(storage=LazyTensorStorage(64), batch_size=32)
    try:
        for batch in collector:
            log_prob = batch["action_log_prob"]  # was "sample_log_prob" before 0.9
            with torch.no_grad():
                gae(batch)
            rb.extend(batch.reshape(-1))
            for _ in range(2):
                losses = loss(rb.sample())
                total = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
                optim.zero_grad()
                total.backward()
                optim.step()
            print(f"log_prob {tuple(log_prob.shape)}, loss_objective {losses['loss_objective'].item():.3f}")
    finally:
        collector.shutdown()


if __name__ == "__main__":
    main()
