"""Benchmark workload: DQN on CartPole, 4 updates per batch of 50 frames, ending after --frames."""
import argparse

import torch
from tensordict.nn import TensorDictSequential
from torch import nn
from torchrl.collectors import Collector
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.envs import GymEnv
from torchrl.modules import EGreedyModule, QValueActor
from torchrl.objectives import DQNLoss, SoftUpdate


def main(frames: int):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    env = GymEnv("CartPole-v1")
    env.set_seed(0)
    qnet = QValueActor(nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 2)), in_keys=["observation"], spec=env.action_spec)
    explore = EGreedyModule(env.action_spec, eps_init=1.0, eps_end=0.05, annealing_num_steps=frames)
    loss = DQNLoss(qnet, action_space=env.action_spec, delay_value=True)
    updater = SoftUpdate(loss, tau=0.01)
    optim = torch.optim.Adam(loss.parameters(), lr=1e-3)
    rb = ReplayBuffer(storage=LazyTensorStorage(10_000), batch_size=64)
    collector = Collector(env, TensorDictSequential(qnet, explore), frames_per_batch=50, total_frames=frames)
    try:
        for data in collector:
            rb.extend(data)
            explore.step(data.numel())
            for _ in range(4):
                value = loss(rb.sample())["loss"]
                optim.zero_grad()
                value.backward()
                optim.step()
                updater.step()
    finally:
        collector.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames", type=int, default=4000)
    main(parser.parse_args().frames)
