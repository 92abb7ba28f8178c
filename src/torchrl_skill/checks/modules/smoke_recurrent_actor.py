"""Smoke-test recurrent TorchRL policies (LSTMModule, GRUModule) on CPU: primer, is_init, hidden state through rollouts and a Collector.

On gymnasium's CartPole-v1 (GymEnv, no download): checks that the bundled helper flags
an env lacking InitTracker and the hidden-state primer (the cause of
KeyError: 'key "is_init" not found'); an LSTM Q-value policy and a GRU categorical policy
each run env.rollout with get_env_transforms_from_module(policy) appended, carrying the
hidden state from ("next", key) at step t to key at step t+1; a Collector built with
auto_register_policy_transforms=True carries it too, it changes across steps and is zero
at each is_init reset; and set_recurrent_mode(True) on a [B, T] slice of the collected
data recomputes the step-by-step features from the first hidden state of each
trajectory. The GRU collector run is behind --gru-collector.
"""

from __future__ import annotations

import functools

from torchrl_skill.report import skill_report as sr  # noqa: E402

EXAMPLE = "python $SKILL_DIR/sub-skills/modules-and-policies/scripts/smoke_recurrent_actor.py --steps 20 --gru-collector --json"
HIDDEN = 8


def build_parser():
    parser = sr.make_parser(__doc__, EXAMPLE)
    parser.add_argument("--steps", type=sr.int_at_least(8), default=20, help="rollout length and frames per collector batch (default: 20)")
    parser.add_argument("--gru-collector", action="store_true", help="also run the GRU policy through a Collector (LSTM always runs)")
    return parser


def make_env():
    """GymEnv("CartPole-v1"), seeded; "observation" [4], one-hot "action" [2]. Needs gymnasium."""
    sr.optional_backend("gymnasium", install="pip install gymnasium (or torchrl[gym_continuous])")
    from torchrl.envs import GymEnv

    env = GymEnv("CartPole-v1")
    env.set_seed(0)
    return env


def make_lstm_policy(action_spec):
    """LSTMModule(observation [*B, 4] -> "embed" [*B, 8]) -> Linear -> QValueModule.

    Reads "observation", "is_init", "recurrent_state_h"/"recurrent_state_c" [*B, 1, 8];
    writes "embed", "action_value", "action", "chosen_action_value" and
    ("next", "recurrent_state_h"/"recurrent_state_c").
    """
    import torch
    from tensordict.nn import TensorDictModule, TensorDictSequential
    from torchrl.modules import LSTMModule, QValueModule

    torch.manual_seed(0)
    lstm = LSTMModule(input_size=4, hidden_size=HIDDEN, in_key="observation", out_key="embed")
    head = TensorDictModule(torch.nn.Linear(HIDDEN, 2), in_keys=["embed"], out_keys=["action_value"])
    return TensorDictSequential(lstm, head, QValueModule(spec=action_spec))


def make_gru_policy(action_spec):
    """GRUModule(observation -> "embed") -> logits -> ProbabilisticActor(OneHotCategorical).

    Hidden key "recurrent_state" [*B, 1, 8]; writes "action" (one-hot [*B, 2]) and "action_log_prob".
    """
    import torch
    from tensordict.nn import TensorDictModule, TensorDictSequential
    from torchrl.modules import GRUModule, OneHotCategorical, ProbabilisticActor

    torch.manual_seed(0)
    gru = GRUModule(input_size=4, hidden_size=HIDDEN, in_key="observation", out_key="embed")
    logits = TensorDictModule(torch.nn.Linear(HIDDEN, 2), in_keys=["embed"], out_keys=["logits"])
    actor = ProbabilisticActor(
        logits, in_keys=["logits"], distribution_class=OneHotCategorical, return_log_prob=True, spec=action_spec
    )
    return TensorDictSequential(gru, actor)


def check_missing_transforms_flagged() -> str:
    from torchrl_skill.checks.modules import policy_checks as _policy_checks
    from torchrl.envs import TransformedEnv
    from torchrl.modules.utils import get_env_transforms_from_module

    env = make_env()
    try:
        policy = make_lstm_policy(env.action_spec)
        findings = _policy_checks.find_missing_recurrent_transforms(env, policy)
        sr.expect(len(findings) == 2, f"bare env: expected 2 findings (is_init, hidden keys), got {findings}")
        fixed = TransformedEnv(env, get_env_transforms_from_module(policy))
        sr.expect(not _policy_checks.find_missing_recurrent_transforms(fixed, policy), "env with InitTracker + primer still flagged")
    finally:
        env.close()
    sr.evidence(2, "envs judged (bare and transformed)")
    return "bare CartPole flagged (is_init, recurrent_state_h/c); TransformedEnv(env, get_env_transforms_from_module(policy)) accepted"


def check_rollout(args, *, kind: str) -> str:
    import torch
    from torchrl.envs import TransformedEnv
    from torchrl.modules.utils import get_env_transforms_from_module

    base = make_env()
    try:
        policy = (make_lstm_policy if kind == "lstm" else make_gru_policy)(base.action_spec)
        env = TransformedEnv(base, get_env_transforms_from_module(policy))
        keys = ["recurrent_state_h", "recurrent_state_c"] if kind == "lstm" else ["recurrent_state"]
        data = env.rollout(args.steps, policy, break_when_any_done=False)
    finally:
        base.close()
    n = data.shape[0]
    for key in keys:
        h, h_next = data[key], data["next", key]
        sr.expect(h.shape == torch.Size([n, 1, HIDDEN]), f"{key} shape {list(h.shape)}, expected [{n}, 1, {HIDDEN}]")
        in_traj = ~data["is_init"].reshape(-1)[1:]  # step t+1 continues step t
        sr.expect(torch.equal(h[1:][in_traj], h_next[:-1][in_traj]), f'{key}[t+1] != ("next", {key})[t] inside a trajectory')
        sr.expect(bool(h[0].abs().max() == 0) and bool(h[1].abs().max() > 0), f"{key} not zero at reset / not updated after step 1")
    sr.evidence(max(n - 1, 0), "step transitions compared")
    return f"{kind.upper()} rollout [{n}]: {', '.join(keys)} [{n}, 1, {HIDDEN}] carried from (\"next\", key)[t] to key[t+1]"


def collect(kind: str, steps: int):
    """One Collector batch of ``steps`` frames with auto_register_policy_transforms=True."""
    import warnings

    from torchrl.collectors import Collector

    env = make_env()
    policy = (make_lstm_policy if kind == "lstm" else make_gru_policy)(env.action_spec)
    collector = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)  # the missing-transforms warning must not fire
            collector = Collector(env, policy, frames_per_batch=steps, total_frames=steps, auto_register_policy_transforms=True)
        data = next(iter(collector))
    finally:
        if collector is not None:
            collector.shutdown()
        env.close()
    return policy, data


def check_collector(args, *, kind: str) -> sr.Passed:
    """Hands ``(policy, batch)`` to the recurrent-mode check."""
    from torchrl_skill.checks.modules import policy_checks as _policy_checks

    steps = args.steps
    policy, data = collect(kind, steps)
    key = "recurrent_state_h" if kind == "lstm" else "recurrent_state"
    carried, changed, resets = _policy_checks.hidden_state_trace(data, key)
    n_init = int(data["is_init"].sum())
    sr.expect(carried, f'{key}[t+1] != ("next", {key})[t] inside a trajectory: hidden state not carried by the collector')
    sr.expect(changed >= (steps - n_init) // 2, f"{key} changed on only {changed} of {steps - n_init} in-trajectory steps")
    sr.expect(resets == n_init >= 1, f"{resets} zero hidden states at {n_init} is_init steps")
    sr.evidence(max(steps - n_init, 0), "in-trajectory steps traced")
    return sr.Passed(
        f"Collector [{steps}] ({kind.upper()}): {key} carried, changed on {changed} steps, zeroed at {resets} is_init reset(s)",
        (policy, data),
    )


def check_recurrent_mode(lstm_batch) -> str:
    import torch
    from torchrl.modules import set_recurrent_mode

    policy, data = lstm_batch
    lstm = policy[0]
    steps = data.shape[0] // 2
    batch = data[: 2 * steps].reshape(2, steps)  # [B, T]
    wiped = batch.clone()
    for key in ("recurrent_state_h", "recurrent_state_c"):
        first = wiped[key][:, :1].clone()
        wiped[key] = torch.zeros_like(wiped[key])  # keep only the state entering each row
        wiped[key][:, :1] = first
    with torch.no_grad(), set_recurrent_mode(True):
        rec = lstm(wiped.clone().exclude("embed"))["embed"]
    with torch.no_grad():
        seq = lstm(wiped.clone().exclude("embed"))["embed"]
    ref = batch["embed"]
    err = (rec - ref).abs().max().item()
    sr.expect(rec.shape == torch.Size([2, steps, HIDDEN]), f"embed shape {list(rec.shape)}")
    sr.expect(err < 1e-5, f"set_recurrent_mode(True) output differs from the collected features by {err:.2e}")
    sr.expect(not torch.allclose(seq, ref, atol=1e-5), "sequential mode matched without stored hidden states (test is vacuous)")
    sr.evidence(rec.numel(), "embed values compared")
    return f'set_recurrent_mode(True) on [2, {steps}]: "embed" [2, {steps}, {HIDDEN}] rebuilt from the first hidden state (max err {err:.1e})'


CHECKS = [
    sr.Check("recurrent:missing-transforms-flagged", check_missing_transforms_flagged,
             proves="an env without the policy's recurrent transforms is flagged, the transformed one accepted"),
    sr.Check("recurrent:lstm-rollout", functools.partial(check_rollout, kind="lstm"),
             proves="the LSTM hidden state is carried from ('next', key)[t] to key[t+1] at every step"),
    sr.Check("recurrent:gru-rollout", functools.partial(check_rollout, kind="gru"),
             proves="the GRU hidden state is carried from ('next', key)[t] to key[t+1] at every step"),
    sr.Check("collector:lstm", functools.partial(check_collector, kind="lstm"), gives="lstm_batch",
             proves="a Collector carries the LSTM hidden state and zeroes it at each reset"),
    sr.Check("collector:gru", functools.partial(check_collector, kind="gru"), flag="gru_collector",
             proves="a Collector carries the GRU hidden state and zeroes it at each reset"),
    sr.Check("recurrent:set_recurrent_mode", check_recurrent_mode,
             proves="set_recurrent_mode(True) rebuilds the collected features from the first hidden state"),
]


def run_checks(args, report: sr.Report) -> None:
    sr.run_declared(CHECKS, report, args=args)


def main(argv=None) -> int:
    return sr.standard_main(__file__, build_parser, run_checks, argv)
