"""Example wiring file: ClipPPOLoss + GAE on a user-written env (torchrl 0.14.1).

Run:  python $SKILL_DIR/sub-skills/objectives-and-training/scripts/check_loss_wiring.py $SKILL_DIR/sub-skills/objectives-and-training/assets/ppo_user_env_wiring.py:build_wiring

Your own file needs no such function: point TARGET at the function that already builds
your loss (train.py:make_loss); returning (loss, batch) or this dict runs every check.
build_wiring() returns the dict check_loss_wiring.py reads:
  "loss"            the LossModule
  "batch"           the TensorDict the loss and the estimator consume, as the collector
                    gave it ([env, time], collected under torch.no_grad())
  "modules"         optional {name: your nn.Module}; name is a network of the loss whose
                    loss.<name>_params exists: actor_network, critic_network (PPO/A2C),
                    qvalue_network (SAC/TD3/REDQ/CQL/IQL), value_network (DQN/DDPG/IQL)
  "value_estimator" optional standalone estimator (GAE, TD0Estimator, ...) to check
"""
import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn
from torchrl.data import Bounded, Composite, Unbounded
from torchrl.envs import EnvBase, StepCounter, TransformedEnv
from torchrl.envs.utils import ExplorationType, set_exploration_type
from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator
from torchrl.objectives import ClipPPOLoss, ValueEstimators


class Point1DEnv(EnvBase):
    """A point on a line pushed toward 0. Observation [x, velocity] (2,), action (1,) in [-2, 2]."""

    def __init__(self):
        super().__init__(device="cpu")
        self.observation_spec = Composite(observation=Unbounded(shape=(2,)))
        self.action_spec = Bounded(low=-2.0, high=2.0, shape=(1,))
        self.reward_spec = Unbounded(shape=(1,))
        self.rng = torch.Generator()

    def _reset(self, tensordict):
        x = torch.rand(1, generator=self.rng) * 2 - 1
        return TensorDict(observation=torch.cat([x, torch.zeros(1)]))

    def _step(self, tensordict):
        a = tensordict["action"]
        x = tensordict["observation"][:1] + 0.05 * a
        done = x.abs() < 0.05
        return TensorDict(observation=torch.cat([x, a]), reward=-x.abs(), done=done, terminated=done.clone())

    def _set_seed(self, seed):
        self.rng.manual_seed(seed)


def make_env():
    """Your env factory: the time limit is a truncation (StepCounter), not a termination."""
    return TransformedEnv(Point1DEnv(), StepCounter(max_steps=20))


def make_actor_critic(env):
    """A TanhNormal actor bounded by the env's Bounded action spec, and a "state_value" critic."""
    spec = env.action_spec  # Bounded: the TanhNormal bounds come from it, not hard-coded
    n_obs = env.observation_spec["observation"].shape[-1]
    actor_net = nn.Sequential(nn.Linear(n_obs, 16), nn.Tanh(), nn.Linear(16, 2 * spec.shape[-1]), NormalParamExtractor())
    actor = ProbabilisticActor(
        TensorDictModule(actor_net, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        spec=spec,
        distribution_class=TanhNormal,
        distribution_kwargs={"low": spec.space.low, "high": spec.space.high},
        return_log_prob=True,  # writes "action_log_prob", read by ClipPPOLoss
    )
    critic = ValueOperator(nn.Sequential(nn.Linear(n_obs, 16), nn.Tanh(), nn.Linear(16, 1)),
                           in_keys=["observation"])  # writes "state_value", read by ClipPPOLoss and GAE
    return actor, critic


def build_wiring():
    torch.manual_seed(0)
    env = make_env()
    env.set_seed(0)
    actor, critic = make_actor_critic(env)
    loss = ClipPPOLoss(actor, critic, clip_epsilon=0.2, entropy_coeff=1e-3)
    loss.make_value_estimator(ValueEstimators.GAE, gamma=0.99, lmbda=0.95)
    # A Collector does both for you; a hand-written rollout needs them:
    # no_grad (a stored log-prob that requires grad makes the loss raise) and RANDOM sampling.
    with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
        batch = env.rollout(64, actor, break_when_any_done=False)
        loss.value_estimator(batch)  # writes "advantage" and "value_target"
    return {
        "loss": loss,
        "batch": batch,
        "modules": {"actor_network": actor, "critic_network": critic},
        "value_estimator": loss.value_estimator,
    }
