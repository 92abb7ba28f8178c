"""Learning benchmark: seeded DQN on gymnasium CartPole-v1 must reach a return threshold.

Not a check script and not a timed test: run it by hand to prove that a DQN recipe wired
the way sub-skills/objectives-and-training documents it (QValueActor + EGreedyModule,
Collector, ReplayBuffer, DQNLoss with make_value_estimator, SoftUpdate) actually learns
on the installed torchrl (verified on torchrl 0.14.1, gymnasium 1.4.0, 2 CPU cores).
Prints the greedy-evaluation return curve, the frames and wall time to the threshold;
exit 0 when the threshold is reached, 1 when not, 2 when gymnasium/torchrl is missing.
"""

from __future__ import annotations

import argparse
import sys
import time


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.strip().split("\n\n")[0],
        epilog="example:\n  python benchmarks/learning_dqn_cartpole.py --threshold 195 --max-frames 60000\n\n"
        "exit codes:\n  0  threshold reached\n  1  threshold not reached within --max-frames\n"
        "  2  cannot run (gymnasium or torchrl missing, bad arguments)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--threshold", type=float, default=195.0, help="mean greedy return over --eval-episodes to reach (default 195)")
    p.add_argument("--max-frames", type=int, default=60_000, help="env frames budget (default 60000)")
    p.add_argument("--eval-every", type=int, default=2_500, help="frames between greedy evaluations (default 2500)")
    p.add_argument("--eval-episodes", type=int, default=5, help="episodes per evaluation (default 5)")
    p.add_argument("--seed", type=int, default=0, help="seed for torch and the env (default 0)")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        import gymnasium  # noqa: F401
        import torch
        from torchrl.collectors import Collector
        from torchrl.data import LazyTensorStorage, ReplayBuffer
        from torchrl.envs import GymEnv, RewardSum, StepCounter, TransformedEnv
        from torchrl.envs.utils import ExplorationType, set_exploration_type
        from torchrl.modules import MLP, EGreedyModule, QValueActor
        from torchrl.objectives import DQNLoss, SoftUpdate
        from tensordict.nn import TensorDictSequential
    except ImportError as err:
        print(f"learning_dqn_cartpole.py: error: {err}; fix: pip install gymnasium torchrl==0.14.1", file=sys.stderr)
        return 2

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)

    def make_env(seed):
        env = TransformedEnv(GymEnv("CartPole-v1"), StepCounter())
        env.append_transform(RewardSum())
        env.set_seed(seed)
        return env

    env, eval_env = make_env(args.seed), make_env(args.seed + 1000)
    qnet = MLP(in_features=4, out_features=2, num_cells=[64, 64], activation_class=torch.nn.ReLU)
    actor = QValueActor(qnet, in_keys=["observation"], spec=env.action_spec)
    greedy = EGreedyModule(env.action_spec, eps_init=1.0, eps_end=0.05, annealing_num_steps=10_000)
    explore = TensorDictSequential(actor, greedy)

    loss = DQNLoss(actor, action_space=env.action_spec, delay_value=True, double_dqn=True)
    loss.make_value_estimator(gamma=0.99)
    updater = SoftUpdate(loss, eps=0.995)
    optim = torch.optim.Adam(loss.parameters(), lr=1e-3)
    rb = ReplayBuffer(storage=LazyTensorStorage(50_000), batch_size=128)
    collector = Collector(
        env, explore, frames_per_batch=50, total_frames=args.max_frames, init_random_frames=1_000
    )

    def evaluate() -> float:
        rets = []
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            for _ in range(args.eval_episodes):
                td = eval_env.rollout(500, actor)
                rets.append(td["next", "episode_reward"][-1].item())
        return sum(rets) / len(rets)

    t0 = time.perf_counter()
    frames, next_eval, reached = 0, args.eval_every, None
    curve = [(0, evaluate())]  # untrained greedy baseline: learning must beat it
    print(f"frames      0  eval return {curve[0][1]:6.1f}  (untrained baseline)", flush=True)
    try:
        for batch in collector:
            frames += batch.numel()
            rb.extend(batch.reshape(-1))
            greedy.step(batch.numel())
            if frames >= 1_000:
                for _ in range(25):  # 1 update per 2 frames
                    sample = rb.sample()
                    out = loss(sample)
                    optim.zero_grad()
                    out["loss"].backward()
                    torch.nn.utils.clip_grad_norm_(loss.parameters(), 10.0)
                    optim.step()
                    updater.step()
            if frames >= next_eval:
                next_eval += args.eval_every
                ret = evaluate()
                curve.append((frames, ret))
                print(f"frames {frames:6d}  eval return {ret:6.1f}  eps {greedy.eps.item():.2f}  "
                      f"wall {time.perf_counter() - t0:6.1f}s", flush=True)
                if ret >= args.threshold:
                    reached = frames
                    break
    finally:
        collector.shutdown()
        env.close()
        eval_env.close()
    wall = time.perf_counter() - t0
    best = max(r for _, r in curve)
    summary = ", ".join(f"{f}:{r:.0f}" for f, r in curve)
    print(f"curve (frames:return) {summary}")
    if reached is not None:
        print(f"RESULT reached mean greedy return >= {args.threshold:g} at {reached} frames "
              f"(untrained baseline {curve[0][1]:.1f}); best {best:.1f}; wall {wall:.1f}s; torch threads {args.threads}")
        return 0
    print(f"RESULT threshold {args.threshold:g} NOT reached in {frames} frames; best {best:.1f}; wall {wall:.1f}s")
    return 1


if __name__ == "__main__":
    sys.exit(main())
