"""Benchmark workload: PPO on 4 Pendulums in a SerialEnv, GAE on [4, 50] batches, 4 minibatch
updates per batch, ending after --frames."""
import argparse

import torch
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn
from torchrl.collectors import Collector
from torchrl.data import LazyTensorStorage, SamplerWithoutReplacement, TensorDictReplayBuffer
from torchrl.envs import GymEnv, SerialEnv, StepCounter, TransformedEnv
from torchrl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE


def make_env():
    return TransformedEnv(GymEnv("Pendulum-v1"), StepCounter(max_steps=200))


def main(frames: int):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    env = SerialEnv(4, make_env)
    env.set_seed(0)
    actor = ProbabilisticActor(
        TensorDictModule(nn.Sequential(MLP(in_features=3, out_features=2, num_cells=[64, 64]), NormalParamExtractor()),
                         in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"], spec=env.action_spec_unbatched, distribution_class=TanhNormal,
        distribution_kwargs={"low": -2.0, "high": 2.0}, return_log_prob=True,
    )
    critic = ValueOperator(MLP(in_features=3, out_features=1, num_cells=[64, 64]), in_keys=["observation"])
    loss = ClipPPOLoss(actor, critic)
    gae = GAE(gamma=0.99, lmbda=0.95, value_network=critic)
    optim = torch.optim.Adam(loss.parameters(), lr=3e-4)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(200), sampler=SamplerWithoutReplacement(), batch_size=50)
    collector = Collector(env, actor, frames_per_batch=200, total_frames=frames)
    try:
        for data in collector:
            with torch.no_grad():
                gae(data)
            rb.extend(data.reshape(-1))
            for _ in range(4):
                out = loss(rb.sample())
                optim.zero_grad()
                (out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]).backward()
                optim.step()
    finally:
        collector.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames", type=int, default=4000)
    main(parser.parse_args().frames)
