"""Training smoke: one PPO iteration on PendulumEnv, one SAC and one DQN update, for real.

PPO: a Collector gathers one batch from PendulumEnv with a TanhNormal actor, GAE fills
"advantage"/"value_target", ClipPPOLoss is backpropagated and one Adam step is taken.
SAC (on Pendulum transitions from a replay buffer) and DQN (on a one-hot batch) take one
update each, followed by SoftUpdate / HardUpdate. Every check asserts finite losses,
non-zero finite gradients on every trained parameter group, parameters changed by the
optimizer step, and TARGET parameters changed by the updater step: a target network
that never moves is a silent fault, and --skip-updater-step shows that this check fails.
"""

from __future__ import annotations


from torchrl_skill.report import skill_report as sr  # noqa: E402

EXAMPLE = (
    "python $SKILL_DIR/sub-skills/objectives-and-training/scripts/smoke_training_step.py --frames 64 --json\n"
    "  python $SKILL_DIR/sub-skills/objectives-and-training/scripts/smoke_training_step.py --skip-updater-step   # must FAIL (exit 1)"
)
PARTS = ("ppo", "sac", "dqn")


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument("--frames", type=sr.int_at_least(4), default=32, help="frames of the PPO collector batch (default 32)")
    parser.add_argument(
        "--skip-updater-step",
        action="store_true",
        help="do not call SoftUpdate/HardUpdate .step(): the target-moved checks must then FAIL",
    )
    parser.add_argument(
        "--only", choices=PARTS, action="append", help="run only these parts (repeatable; default all)"
    )
    return parser


def asked(args, part: str) -> None:
    """Skip the calling check unless ``part`` is among ``--only`` (all parts by default)."""
    if args.only and part not in args.only:
        raise sr.CheckSkipped(f"not asked for (pass --only {part})")


def pendulum_env(seed: int = 0):
    """PendulumEnv whose scalar "th", "thdot" are kept (the modules below featurise them)."""
    from torchrl.envs import PendulumEnv

    env = PendulumEnv()
    env.set_seed(seed)
    return env


def _features():
    """TensorDictModule: "th", "thdot" (scalars) -> "observation" [*B, 3] = (cos th, sin th, thdot)."""
    import torch
    from tensordict.nn import TensorDictModule

    class Features(torch.nn.Module):
        def forward(self, th, thdot):
            return torch.stack([th.cos(), th.sin(), thdot], -1)

    return TensorDictModule(Features(), in_keys=["th", "thdot"], out_keys=["observation"])


def pendulum_actor():
    """TanhNormal ProbabilisticActor for Pendulum (action [*B,1] in [-2, 2]); writes "action_log_prob"."""
    import torch
    from tensordict.nn import NormalParamExtractor, TensorDictModule, TensorDictSequential
    from torchrl.data import Bounded
    from torchrl.modules import ProbabilisticActor, TanhNormal

    net = torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2), NormalParamExtractor())
    body = TensorDictSequential(_features(), TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"]))
    return ProbabilisticActor(
        body,
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        distribution_kwargs={"low": -2.0, "high": 2.0},
        return_log_prob=True,
        spec=Bounded(-2.0, 2.0, (1,)),
    )


def grad_report(named_params, label: str) -> str:
    """Fail unless every parameter in ``named_params`` got a finite gradient and some are non-zero."""
    import torch

    named = list(named_params)
    sr.expect(bool(named), f"{label}: no parameters to check")
    missing = [n for n, p in named if p.grad is None]
    sr.expect(not missing, f"{label}: no gradient reached {missing[:3]} (detached or not in the graph)")
    sr.expect(all(torch.isfinite(p.grad).all() for _, p in named), f"{label}: non-finite gradient")
    total = sum(float(p.grad.abs().sum()) for _, p in named)
    sr.expect(total > 0, f"{label}: all gradients are zero")
    return f"{label} |grad|={total:.3g} over {len(named)} tensors"


def snapshot(params):
    """Detached clone of a TensorDict of parameters (e.g. ``loss.target_qvalue_network_params``)."""
    return params.detach().clone()


def moved(before, after) -> float:
    """Largest absolute change between two parameter TensorDicts."""
    return max(float((a - b).abs().max()) for a, b in zip(before.values(True, True), after.detach().values(True, True)))


def expect_target_moved(before, loss, target_name: str, updater_name: str) -> str:
    """Fail when ``loss.<target_name>`` did not change: the updater step was not taken.

    This is what a loop without ``updater.step()`` looks like: losses finite, gradients
    fine, and a target network frozen at its initial weights forever.
    """
    delta = moved(before, getattr(loss, target_name))
    sr.expect(
        delta > 0,
        f"{target_name} did not move (max |change| 0): call {updater_name}.step() after each optimizer step "
        "(torchrl.objectives.SoftUpdate / HardUpdate); without it the bootstrap target stays frozen at its initial weights",
    )
    return f"{target_name} moved by {delta:.2e} after {updater_name}.step()"


def check_ppo(args) -> str:
    """One Collector batch on PendulumEnv, GAE, one ClipPPOLoss backward and Adam step."""
    asked(args, "ppo")
    import torch
    from torchrl.collectors import Collector
    from torchrl.modules import ValueOperator
    from tensordict.nn import TensorDictSequential
    from torchrl.objectives import ClipPPOLoss, ValueEstimators

    torch.manual_seed(0)
    env = pendulum_env()
    actor = pendulum_actor()
    critic = TensorDictSequential(_features(), ValueOperator(torch.nn.Linear(3, 1), in_keys=["observation"]))
    loss = ClipPPOLoss(actor, critic, clip_epsilon=0.2, entropy_coeff=0.01)
    loss.make_value_estimator(ValueEstimators.GAE, gamma=0.99, lmbda=0.95)
    collector = Collector(env, actor, frames_per_batch=args.frames, total_frames=args.frames)
    try:
        batch = next(iter(collector))
    finally:
        collector.shutdown()
        env.close()
    sr.expect("action_log_prob" in batch.keys(), f"collector batch lacks 'action_log_prob': {sorted(batch.keys())}")
    with torch.no_grad():
        loss.value_estimator(batch, params=loss.critic_network_params, target_params=loss.target_critic_network_params)
    sr.expect("advantage" in batch.keys(), "GAE did not write 'advantage'")
    out = loss(batch)
    total = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
    sr.expect(bool(torch.isfinite(total)), f"PPO loss not finite: {total}")
    opt = torch.optim.Adam(loss.parameters(), lr=1e-2)
    opt.zero_grad()
    total.backward()
    g_actor = grad_report(actor.named_parameters(), "actor")
    g_critic = grad_report(critic.named_parameters(), "critic")
    before = {n: p.detach().clone() for n, p in actor.named_parameters()}
    opt.step()
    sr.expect(any(not torch.equal(before[n], p) for n, p in actor.named_parameters()), "actor unchanged after opt.step()")
    sr.evidence(batch.batch_size.numel(), "collected frames trained on")
    return (
        f"Collector {list(batch.batch_size)} frames, GAE advantage {list(batch['advantage'].shape)}, "
        f"loss {float(total):.3f}; {g_actor}; {g_critic}; user actor updated in place (PPO shares its params)"
    )


def check_sac(args) -> str:
    """One SACLoss update on Pendulum transitions from a replay buffer, then SoftUpdate."""
    asked(args, "sac")
    import torch
    from torchrl.data import LazyTensorStorage, ReplayBuffer
    from torchrl.modules import ValueOperator
    from tensordict.nn import TensorDictModule, TensorDictSequential
    from torchrl.objectives import SACLoss, SoftUpdate

    torch.manual_seed(0)
    env = pendulum_env()
    actor = pendulum_actor()

    class QSA(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        def forward(self, observation, action):
            return self.linear(torch.cat([observation, action], -1))

    qnet = TensorDictSequential(_features(), ValueOperator(QSA(), in_keys=["observation", "action"]))
    loss = SACLoss(actor, qnet, num_qvalue_nets=2)
    loss.make_value_estimator(gamma=0.99)
    updater = SoftUpdate(loss, tau=0.05)
    rb = ReplayBuffer(storage=LazyTensorStorage(100), batch_size=16)
    try:
        with torch.no_grad():
            rb.extend(env.rollout(32, actor))
    finally:
        env.close()
    sample = rb.sample()
    out = loss(sample)
    total = out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]
    sr.expect(bool(torch.isfinite(total)), f"SAC loss not finite: {total}")
    opt = torch.optim.Adam(loss.parameters(), lr=1e-2)
    opt.zero_grad()
    total.backward()
    g_q = grad_report(loss.qvalue_network_params.items(True, True), "qvalue copies")
    g_a = grad_report(actor.named_parameters(), "actor")
    target_before = snapshot(loss.target_qvalue_network_params)
    opt.step()
    if not args.skip_updater_step:
        updater.step()
    moved_msg = expect_target_moved(target_before, loss, "target_qvalue_network_params", "SoftUpdate")
    sr.evidence(len(rb), "buffer rows trained on")
    return f"SACLoss(num_qvalue_nets=2) loss {float(total):.3f}; {g_q}; {g_a}; {moved_msg}"


def check_dqn(args) -> str:
    """Two DQNLoss updates on a one-hot batch, then HardUpdate (copies on its 2nd step())."""
    asked(args, "dqn")
    import torch
    from torchrl.objectives import DQNLoss, HardUpdate

    from torchrl_skill.checks.objectives import loss_builders as builders

    torch.manual_seed(0)
    actor = builders.q_actor()
    loss = DQNLoss(actor, action_space="one-hot", delay_value=True)
    loss.make_value_estimator(gamma=0.99)
    updater = HardUpdate(loss, value_network_update_interval=1)
    opt = torch.optim.Adam(loss.parameters(), lr=1e-2)
    batch = builders.make_batch("discrete", 16)
    target_before = snapshot(loss.target_value_network_params)
    # HardUpdate copies when its counter equals value_network_update_interval; the counter
    # starts at 0, so with interval=1 the first copy happens on the 2nd step() call
    # (torchrl/objectives/utils.py, HardUpdate._step, 0.14.1): take two updates.
    for _ in range(2):
        out = loss(batch)
        sr.expect(bool(torch.isfinite(out["loss"])), f"DQN loss not finite: {out['loss']}")
        opt.zero_grad()
        out["loss"].backward()
        g = grad_report(actor.named_parameters(), "value network")
        opt.step()
        if not args.skip_updater_step:
            updater.step()
    moved_msg = expect_target_moved(target_before, loss, "target_value_network_params", "HardUpdate")
    sr.evidence(batch.batch_size.numel(), "batch rows trained on")
    return f"DQNLoss loss {float(out['loss']):.3f}; {g}; {moved_msg} (value_network_update_interval=1, copied on the 2nd step())"


CHECKS = [
    sr.Check("ppo:one-iteration-pendulum", check_ppo,
             proves="one collected batch gives GAE advantages, finite ClipPPOLoss terms and gradients, and an Adam step"),
    sr.Check("sac:update+SoftUpdate", check_sac, proves="a SACLoss update gives gradients and SoftUpdate.step() moves the target"),
    sr.Check("dqn:update+HardUpdate", check_dqn, proves="DQNLoss updates give gradients and HardUpdate copies the target on its 2nd step()"),
]


def run_checks(args, report: sr.Report) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sr.run_declared(CHECKS, report, args=args)


def main(argv=None) -> int:
    return sr.standard_main(__file__, build_parser, run_checks, argv)
