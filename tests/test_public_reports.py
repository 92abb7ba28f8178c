"""One test per public pytorch/rl report of the sweep table (tests/public_reports.md).

Each test rebuilds the report's setup with tiny envs/tensordicts and asserts what torchrl 0.14.1
does today (the fault, or its fix); the last test checks the table itself. Over 400 lines on
purpose: one short test per report keeps each report next to its proof.
"""

from __future__ import annotations

import ast
import re
import time
import warnings
from queue import Empty

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn

from conftest import BUNDLE

warnings.filterwarnings("ignore", message="No target network updater")
B = torch.bool


# ---------------------------------------------------------------- tiny shared fixtures
def _episodes(n=2, T=10):
    return [TensorDict({"obs": torch.arange(T), "episode": torch.full((T,), i)}, [T]) for i in range(n)]


def _dqn_batch(n=6):
    z = torch.zeros(n, 1, dtype=B)
    return TensorDict({"observation": torch.randn(n, 3), "action": torch.eye(2)[torch.randint(2, (n,))],
                       ("next", "observation"): torch.randn(n, 3), ("next", "reward"): torch.randn(n, 1),
                       ("next", "done"): z, ("next", "terminated"): z}, [n])


def _ma_actor(obs=4, act=2):
    from torchrl.modules import ProbabilisticActor, TanhNormal

    net = TensorDictModule(nn.Sequential(nn.Linear(obs, 2 * act), NormalParamExtractor()),
                           [("agents", "observation")], [("agents", "loc"), ("agents", "scale")])
    return ProbabilisticActor(net, in_keys={"loc": ("agents", "loc"), "scale": ("agents", "scale")},
                              out_keys=[("agents", "action")], distribution_class=TanhNormal,
                              return_log_prob=True, log_prob_key=("agents", "action_log_prob"))


def _ma_critic(obs=4):
    return TensorDictModule(nn.Linear(obs, 1), [("agents", "observation")], [("agents", "state_value")])


def _ma_batch(E=2, T=5, n=3):
    nxt = TensorDict({("agents", "observation"): torch.randn(E, T, n, 4), ("agents", "reward"): torch.randn(E, T, n, 1),
                      "done": torch.zeros(E, T, 1, dtype=B), "terminated": torch.zeros(E, T, 1, dtype=B)}, [E, T])
    nxt["done"][:, -1] = True
    return TensorDict({("agents", "observation"): torch.randn(E, T, n, 4), ("agents", "action"): torch.rand(E, T, n, 2) * 1.8 - 0.9,
                       ("agents", "action_log_prob"): torch.randn(E, T, n), "next": nxt}, [E, T])


def _team_env_cls():
    from torchrl.data import Categorical, Composite, Unbounded
    from torchrl.envs import EnvBase

    class TeamEnv(EnvBase):
        """Two agents under "agents", done keys at the root and per agent; the team ends after `num_steps`."""

        def __init__(self, num_steps=1000, n=2):
            super().__init__()
            self.n, self.num_steps, self.count = n, num_steps, 0
            self.observation_spec = Composite(agents=Composite(observation=Unbounded((n, 3)), shape=(n,)))
            self.action_spec = Composite(agents=Composite(action=Unbounded((n, 1)), shape=(n,)))
            self.reward_spec = Composite(agents=Composite(reward=Unbounded((n, 1)), shape=(n,)))
            b = lambda *s: Categorical(2, shape=s, dtype=B)  # noqa: E731
            self.done_spec = Composite(done=b(1), terminated=b(1), truncated=b(1),
                                       agents=Composite(done=b(n, 1), terminated=b(n, 1), truncated=b(n, 1), shape=(n,)))

        def _out(self, over=False):
            f = lambda *s: torch.full(s, over, dtype=B)  # noqa: E731
            td = TensorDict({("agents", "observation"): torch.full((self.n, 3), float(self.count))}, [])
            no = lambda *s: torch.zeros(s, dtype=B)  # noqa: E731
            td.update({"done": f(1), "terminated": f(1), "truncated": no(1), ("agents", "done"): f(self.n, 1),
                       ("agents", "terminated"): f(self.n, 1), ("agents", "truncated"): no(self.n, 1)})
            return td

        def _reset(self, td):
            self.count = 0
            return self._out()

        def _step(self, td):
            self.count += 1
            out = self._out(self.count >= self.num_steps)
            out["agents", "done"][0] = out["agents", "terminated"][0] = True  # agent 0 is out of the game
            out["agents", "reward"] = torch.ones(self.n, 1)
            return out

        def _set_seed(self, seed):
            pass

    return TeamEnv


def _cartpole_counted():
    from torchrl.envs import GymEnv, StepCounter

    return GymEnv("CartPole-v1").append_transform(StepCounter())


def _pendulum():
    from torchrl.envs import GymEnv

    return GymEnv("Pendulum-v1")


def _parallel_cartpole():
    from torchrl.envs import ParallelEnv

    return ParallelEnv(2, _cartpole_counted)


class _SlowEnvFactory:
    def __call__(self):
        from torchrl.data import Composite, Unbounded
        from torchrl.envs import EnvBase

        class Slow(EnvBase):
            def __init__(self):
                super().__init__()
                self.observation_spec = Composite(observation=Unbounded((1,)))
                self.action_spec, self.reward_spec = Unbounded((1,)), Unbounded((1,))

            def _reset(self, td):
                return TensorDict(observation=torch.zeros(1))

            def _step(self, td):
                time.sleep(0.5)  # longer than the patched gather timeout, so the first get times out
                return TensorDict(observation=torch.zeros(1), reward=torch.zeros(1), done=torch.zeros(1, dtype=B))

            def _set_seed(self, seed):
                pass

        return Slow()


# ---------------------------------------------------------------- replay buffers
def test_2948_add_stores_one_item_extend_one_per_step():
    from torchrl.data import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer

    for how, length in (("add", 2), ("extend", 20)):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), sampler=SliceSampler(slice_len=5, traj_key="episode"))
        for ep in _episodes():
            getattr(rb, how)(ep)
        assert len(rb) == length
    assert rb.sample(10)["obs"].shape == (10,)


def test_2437_memmap_scratch_dir_existsok(tmp_path):
    from torchrl.data import LazyMemmapStorage, ReplayBuffer

    data = TensorDict({"a": torch.arange(12.0).view(3, 4)}, [3])
    ReplayBuffer(storage=LazyMemmapStorage(10, scratch_dir=tmp_path)).extend(data)
    with pytest.raises(RuntimeError, match=r"\.memmap already exists"):
        ReplayBuffer(storage=LazyMemmapStorage(10, scratch_dir=tmp_path)).extend(data)
    rb = ReplayBuffer(storage=LazyMemmapStorage(10, scratch_dir=tmp_path, existsok=True))
    rb.extend(data)
    assert torch.equal(rb[:]["a"], data["a"])


def _prb(storage):
    from torchrl.data import PrioritizedSampler, TensorDictReplayBuffer

    return TensorDictReplayBuffer(storage=storage, sampler=PrioritizedSampler(max_capacity=100, alpha=0.6, beta=0.4),
                                  batch_size=12, priority_key="td_error")


@pytest.mark.parametrize("memmap", [False, True])
def test_3053_3055_3056_prioritized_buffer_dumps_loads(tmp_path, memmap):
    from torchrl.data import LazyMemmapStorage, LazyTensorStorage

    make = (lambda d: LazyMemmapStorage(100, scratch_dir=d)) if memmap else (lambda d: LazyTensorStorage(100))
    rb = _prb(make(tmp_path / "a"))
    rb.extend(TensorDict({"a": torch.arange(12).view(3, 4), ("b", "c"): torch.arange(15).view(3, 5)}, [3]))
    s = rb.sample()
    s["td_error"] = torch.arange(12.0)
    rb.update_tensordict_priority(s)
    rb.dumps(tmp_path / "ck")
    rb2 = _prb(make(tmp_path / "b"))
    rb2.loads(tmp_path / "ck")
    assert len(rb2) == 3 and torch.equal(rb2[:]["b", "c"], rb[:]["b", "c"])
    prio = lambda buf: [buf.sampler._sum_tree.query(i, i + 1) for i in range(3)]  # noqa: E731
    assert prio(rb2) == pytest.approx(prio(rb)) and len(set(prio(rb))) > 1  # updated priorities survive


def test_3120_prioritized_buffer_over_loaded_storage(tmp_path):
    from torchrl.data import LazyTensorStorage, PrioritizedSampler, TensorDictReplayBuffer

    rb = _prb(LazyTensorStorage(10))
    rb.extend(TensorDict({"state": torch.ones(4, 2)}, [4]))
    rb.dumps(tmp_path)
    loaded = _prb(LazyTensorStorage(10))
    loaded.loads(tmp_path)
    fresh = TensorDictReplayBuffer(storage=loaded.storage, sampler=PrioritizedSampler(10, alpha=0.7, beta=0.5), batch_size=2)
    assert fresh.sample().shape == (2,)


def test_4369_max_value_writer_after_loads(tmp_path):
    from torchrl.data import LazyTensorStorage, TensorDictMaxValueWriter, TensorDictReplayBuffer

    make = lambda: TensorDictReplayBuffer(storage=LazyTensorStorage(4), writer=TensorDictMaxValueWriter(rank_key="reward"))  # noqa: E731
    rb = make()
    rb.extend(TensorDict(reward=torch.tensor([1.0, 5.0, 3.0]), obs=torch.arange(3), batch_size=[3]))
    rb.dumps(tmp_path)
    restored = make()
    restored.loads(tmp_path)
    restored.extend(TensorDict(reward=torch.tensor([2.0]), obs=torch.tensor([3]), batch_size=[1]))
    assert sorted(restored[:]["obs"].tolist()) == [0, 1, 2, 3]


def test_3515_ndim3_buffer_with_one_agent():
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1000, ndim=3), batch_size=4)
    td = TensorDict({"obs": torch.randn(1, 7, 1, 3)}, [1, 7, 1])
    rb.extend(td)
    rb.extend(td)
    assert len(rb) == 14 and rb.sample().shape == (4,)


# ---------------------------------------------------------------- collectors
def test_3234_trajs_per_batch_yields_whole_episodes():
    from torchrl.collectors import Collector
    from torchrl.envs import SerialEnv

    env = SerialEnv(2, _cartpole_counted)
    env.set_seed(0)
    c = Collector(env, None, frames_per_batch=60, trajs_per_batch=3, total_frames=200)
    try:
        b = next(iter(c))
    finally:
        c.shutdown()
    mask = b["collector", "mask"]
    assert b.shape[0] == 3 and mask.shape == b.shape
    for i in range(3):
        steps = b["step_count"][i][mask[i]].squeeze(-1)
        assert steps[0] == 0 and torch.equal(steps, torch.arange(len(steps)))  # one whole episode from its start
        assert b["next", "done"][i][mask[i]][-1].all() and not b["next", "done"][i][mask[i]][:-1].any()


def test_3866_loss_skips_masked_padding():
    from torchrl.data import OneHot
    from torchrl.modules import QValueActor
    from torchrl.objectives import DQNLoss

    loss = DQNLoss(QValueActor(nn.Linear(3, 2), in_keys=["observation"], spec=OneHot(2)), action_space="one-hot", delay_value=False)
    td, valid = _dqn_batch(), torch.tensor([True] * 4 + [False] * 2)
    padded = td.clone()
    padded[~valid] = padded[~valid].zero_()
    padded["collector", "mask"] = valid
    assert loss.loss_mask_key == "auto"
    assert torch.allclose(loss(td[valid].clone())["loss"], loss(padded.clone())["loss"])


def _fill_one_step_batches(rb, flatten):
    from torchrl.collectors import Collector
    from torchrl.envs import SerialEnv

    env = SerialEnv(2, _cartpole_counted)
    env.set_seed(0)
    c = Collector(env, None, frames_per_batch=2, total_frames=60)  # [2 envs, 1 step] per batch
    for d in c:
        rb.extend(d.reshape(-1) if flatten else d)
    c.shutdown()


def test_3194_interleaved_storage_and_its_fixes():
    from torchrl.data import LazyTensorStorage, ReplayBuffer, SliceSampler

    key = ("collector", "traj_ids")
    rb = ReplayBuffer(storage=LazyTensorStorage(1000), sampler=SliceSampler(slice_len=4, traj_key=key), batch_size=8)
    _fill_one_step_batches(rb, flatten=True)
    assert rb[:6][key].tolist() == [0, 1, 0, 1, 0, 1]
    with pytest.raises(RuntimeError, match="Did not find a single trajectory with sufficient length"):
        rb.sample()
    for rb in (ReplayBuffer(storage=LazyTensorStorage(1000), sampler=SliceSampler(slice_len=4, traj_key=key, fragmented=True), batch_size=8),
               ReplayBuffer(storage=LazyTensorStorage(1000, ndim=2), sampler=SliceSampler(slice_len=4, traj_key=key), batch_size=8)):
        _fill_one_step_batches(rb, flatten=rb.storage.ndim == 1)
        s = rb.sample()
        ids, steps = s[key].view(2, 4), s["step_count"].view(2, 4)
        assert (ids == ids[:, :1]).all() and (steps.diff(dim=1) == 1).all()


def test_3137_unbatched_env_traj_ids():
    from torchrl.collectors import Collector
    from torchrl.envs import GymEnv, StepCounter

    c = Collector(GymEnv("CartPole-v1").append_transform(StepCounter(max_steps=6)), None, frames_per_batch=20, total_frames=20)
    b = next(iter(c))
    c.shutdown()
    assert b["collector", "traj_ids"].shape == (20,) and b["collector", "traj_ids"][:12].tolist() == [0] * 6 + [1] * 6


@pytest.mark.slow
def test_3238_multisync_set_seed_split_trajs():
    from torchrl.collectors import MultiSyncCollector

    policy = TensorDictModule(nn.Linear(3, 1), in_keys=["observation"], out_keys=["action"])
    c = MultiSyncCollector([_pendulum, _pendulum], policy, total_frames=100, max_frames_per_traj=25, frames_per_batch=100,
                           split_trajs=True, cat_results=0)
    c.set_seed(42)
    try:
        data = next(iter(c))
    finally:
        c.shutdown()
    ids = data["collector", "traj_ids"]
    assert ids[:, 0].unique().numel() == ids.shape[0]  # one distinct trajectory per row


@pytest.mark.slow
def test_3240_parallel_env_in_multisync_with_replay_buffer():
    from torchrl.collectors import MultiSyncCollector
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    rb = ReplayBuffer(storage=LazyTensorStorage(512, ndim=2), batch_size=5)
    c = MultiSyncCollector([_parallel_cartpole], None, frames_per_batch=20, total_frames=40, replay_buffer=rb)
    try:
        n = sum(1 for _ in c)
    finally:
        c.shutdown()
    assert n == 2 and len(rb) == 40 and rb.sample().shape == (5,)


@pytest.mark.slow
def test_3840_multisync_stops_gathering_when_all_reported(monkeypatch):
    import torchrl.collectors._multi_sync as ms
    from torchrl.collectors import MultiSyncCollector

    monkeypatch.setattr(ms, "_TIMEOUT", 0.2)
    c = MultiSyncCollector([_SlowEnvFactory()] * 2, None, frames_per_batch=2, total_frames=2)
    log, get = [], c.queue_out.get

    def counting_get(*args, **kwargs):
        try:
            out = get(*args, **kwargs)
        except Empty:
            log.append("empty")
            raise
        log.append("ok")
        return out

    c.queue_out.get = counting_get
    try:
        next(iter(c))
    finally:
        c.shutdown()
    assert "empty" in log  # the precondition of the report: a get timed out first
    assert log[-1] == "ok" and log.count("ok") == 2  # and no get was issued after the last worker reported


# ---------------------------------------------------------------- losses and trainers
def test_3069_loss_forward_runs_noisylinear_without_noise():
    from torchrl.data import OneHot
    from torchrl.envs.utils import ExplorationType, set_exploration_type
    from torchrl.modules import NoisyLinear, QValueActor
    from torchrl.objectives import DQNLoss

    def sigma_grad(loss, net):
        loss.zero_grad()
        loss(_dqn_batch())["loss"].backward()
        return net.weight_sigma.grad

    layer = NoisyLinear(3, 2)
    loss = DQNLoss(QValueActor(layer, in_keys=["observation"], spec=OneHot(2)), action_space="one-hot", delay_value=False)
    assert loss.deterministic_sampling_mode == ExplorationType.DETERMINISTIC
    with set_exploration_type(ExplorationType.RANDOM):  # an outer context does not help: the loss sets its own
        assert sigma_grad(loss, layer) is None
    layer.eval()
    with set_exploration_type(ExplorationType.RANDOM):
        assert not torch.equal(layer.weight, layer.weight_mu)  # eval() does not switch the noise off
    layer.train()
    loss.deterministic_sampling_mode = ExplorationType.RANDOM
    assert sigma_grad(loss, layer).abs().sum() > 0
    legacy = NoisyLinear(3, 2, use_exploration_type=False)
    loss2 = DQNLoss(QValueActor(legacy, in_keys=["observation"], spec=OneHot(2)), action_space="one-hot", delay_value=False)
    assert sigma_grad(loss2, legacy).abs().sum() > 0


def test_3316_root_advantage_raises_and_per_agent_keys_work():
    from torchrl.envs import ExpandAs
    from torchrl.objectives import ClipPPOLoss, MAPPOLoss

    keys = dict(action=("agents", "action"), sample_log_prob=("agents", "action_log_prob"), value=("agents", "state_value"),
                reward=("agents", "reward"), advantage=("agents", "advantage"), value_target=("agents", "value_target"))
    ppo = ClipPPOLoss(_ma_actor(), _ma_critic())
    ppo.set_keys(**keys)
    ppo.make_value_estimator(gamma=0.9, lmbda=0.9)
    with pytest.raises(RuntimeError, match="must share a unique shape"):
        ppo(_ma_batch())  # root done, per-agent reward
    mappo = MAPPOLoss(_ma_actor(), _ma_critic())
    mappo.set_keys(**keys)
    assert torch.isfinite(mappo(_ma_batch())["loss_objective"])  # MAPPOLoss broadcasts the root done
    data = _ma_batch()
    for k in ("done", "terminated"):
        data = ExpandAs(in_key=("next", k), ref_key=("next", "agents", "reward"), out_key=("next", "agents", k))(data)
    ppo.set_keys(done=("agents", "done"), terminated=("agents", "terminated"))
    assert data["next", "agents", "done"].shape == (2, 5, 3, 1) and torch.isfinite(ppo(data)["loss_objective"])


def test_3122_trailing_dim_actions_broadcast_in_ppo():
    from torchrl.data import Categorical
    from torchrl.modules import ProbabilisticActor, ValueOperator
    from torchrl.objectives import ClipPPOLoss

    def log_weight_shape(spec, action):
        actor = ProbabilisticActor(TensorDictModule(nn.Linear(3, 4), ["observation"], ["logits"]), in_keys=["logits"], spec=spec,
                                   distribution_class=torch.distributions.Categorical, return_log_prob=True)
        loss = ClipPPOLoss(actor, ValueOperator(nn.Linear(3, 1), in_keys=["observation"]))
        td = TensorDict({"observation": torch.randn(8, 3), "action": action, "action_log_prob": torch.randn(8),
                         "advantage": torch.randn(8, 1), "value_target": torch.randn(8, 1)}, [8])
        return tuple(loss._log_weight(td, adv_shape=td["advantage"].shape[:-1])[0].shape)

    assert log_weight_shape(Categorical(4, shape=(1,)), torch.randint(4, (8, 1))) == (8, 8, 1)  # silent outer product
    assert log_weight_shape(Categorical(4), torch.randint(4, (8,))) == (8, 1)


class _Q(nn.Module):
    def __init__(self, in_features):
        super().__init__()
        self.lin = nn.Linear(in_features, 1)

    def forward(self, obs, act):
        return self.lin(torch.cat([obs, act], -1))


def _sac_parts(action_dim):
    from torchrl.data import Bounded
    from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator

    actor = ProbabilisticActor(TensorDictModule(nn.Sequential(nn.Linear(4, 2 * action_dim), NormalParamExtractor()), ["observation"], ["loc", "scale"]),
                               in_keys=["loc", "scale"], spec=Bounded(-1, 1, shape=(action_dim,)), distribution_class=TanhNormal)

    return actor, lambda: ValueOperator(_Q(4 + action_dim), in_keys=["observation", "action"])


@pytest.mark.parametrize("action_dim", [1, 3])
def test_3291_sac_target_entropy_auto_counts_action_dims(action_dim):
    from torchrl.objectives import SACLoss

    actor, q = _sac_parts(action_dim)
    assert SACLoss(actor, q()).target_entropy.item() == -action_dim


def test_3309_crossq_explicit_target_entropy():
    from torchrl.objectives import CrossQLoss

    actor, q = _sac_parts(3)
    assert CrossQLoss(actor, q(), target_entropy=-5.0).target_entropy.item() == -5.0


def test_4076_soft_update_list_critics():
    from torchrl.objectives import SACLoss, SoftUpdate

    actor, q = _sac_parts(2)
    loss = SACLoss(actor, [q(), q()])
    updater = SoftUpdate(loss, eps=0.5)
    with torch.no_grad():
        for p in loss.qvalue_network_params.values(True, True):
            p.add_(1.0)
    before = [t.clone() for t in loss.target_qvalue_network_params.values(True, True)]
    updater.step()
    assert all(not torch.equal(a, b) for a, b in zip(loss.target_qvalue_network_params.values(True, True), before))


def test_4209_vtrace_truncation_bootstraps_own_episode():
    from torchrl.objectives.value.functional import vtrace_advantage_estimate

    value = torch.tensor([1.0, 1.0, 10.0, 10.0]).view(4, 1)  # trajectory A = steps 0-1 (truncated at 1), B = steps 2-3
    done = torch.tensor([False, True, False, False]).view(4, 1)
    zeros = torch.zeros(4, 1)
    adv, _ = vtrace_advantage_estimate(0.9, zeros, zeros, value, value.clone(), zeros, done, torch.zeros(4, 1, dtype=B), time_dim=-2)
    assert adv[1].item() == pytest.approx(0.9 * 1.0 - 1.0, abs=1e-5)  # bootstraps V(next obs of A), not B's value


@pytest.mark.slow
def test_4366_td3_trainer_on_multisync_collector():
    from torchrl.collectors import MultiSyncCollector
    from torchrl.modules import Actor, ValueOperator
    from torchrl.objectives import SoftUpdate, TD3Loss
    from torchrl.trainers.algorithms import TD3Trainer

    spec = _pendulum().action_spec
    actor = Actor(nn.Sequential(nn.Linear(3, 1), nn.Tanh()), spec=spec)
    loss = TD3Loss(actor, ValueOperator(_Q(4), in_keys=["observation", "action"]), action_spec=spec)
    coll = MultiSyncCollector([_pendulum], actor, frames_per_batch=20, total_frames=40)
    try:
        assert not hasattr(coll, "env")
        trainer = TD3Trainer(collector=coll, total_frames=40, frame_skip=1, optim_steps_per_batch=1, loss_module=loss,
                             target_net_updater=SoftUpdate(loss, eps=0.99), progress_bar=False, enable_logging=False)
        assert trainer.collector is coll
    finally:
        coll.shutdown()


def test_3520_reward_loss_identical_pairs():
    from types import SimpleNamespace

    from torchrl.modules.models.llm import GPT2RewardModel

    ids = torch.tensor([[1, 2, 3, 4, 5, 50256]])
    chosen = SimpleNamespace(input_ids=ids, rewards=torch.randn(1, 6, requires_grad=True))
    rejected = SimpleNamespace(input_ids=ids.clone(), rewards=torch.randn(1, 6, requires_grad=True))
    loss = GPT2RewardModel.compute_reward_loss(chosen, rejected, pad_token_id=50256)
    loss.backward()
    assert loss.item() == 0.0 and (chosen.rewards.grad == 0).all()


# ---------------------------------------------------------------- modules
def test_3059_qvalue_actor_strict_shape():
    from torchrl.data import Categorical
    from torchrl.modules import QValueActor

    def run(**kw):
        actor = QValueActor(nn.Linear(3, 4), in_keys=["observation"], spec=Categorical(4, shape=(1,)), **kw)
        return actor(TensorDict({"observation": torch.randn(12, 3)}, [12]))["action"].shape

    with pytest.raises(RuntimeError, match="does not match expected shape"):
        run()
    assert run(strict_shape="auto") == (12, 1)


def test_3147_recurrent_mode_restarts_at_is_init():
    from torchrl.modules import LSTMModule, set_recurrent_mode

    torch.manual_seed(0)
    lstm = LSTMModule(input_size=2, hidden_size=4, in_key="obs", out_key="feat")
    obs = torch.randn(1, 6, 2)
    td = TensorDict({"obs": obs, "recurrent_state_h": torch.zeros(1, 6, 1, 4), "recurrent_state_c": torch.zeros(1, 6, 1, 4)}, [1, 6])
    with set_recurrent_mode(True), pytest.raises(KeyError, match="is_init"):
        lstm(td.clone())
    td["is_init"] = torch.zeros(1, 6, 1, dtype=B)
    td["is_init"][0, 0] = td["is_init"][0, 3] = True
    with set_recurrent_mode(True):
        out = lstm(td.clone())
    second_alone, _ = lstm.lstm(obs[:, 3:])
    assert torch.allclose(out["feat"][:, 3:], second_alone, atol=1e-6)


def test_3711_lstm_state_at_trajectory_end():
    from torchrl.modules import LSTMModule, set_recurrent_mode

    torch.manual_seed(0)
    lstm = LSTMModule(input_size=2, hidden_size=4, in_key="obs", out_key="feat")
    obs = torch.ones(1, 5, 2)
    obs[0, 3:] = 2.0
    init = torch.zeros(1, 5, 1, dtype=B)
    init[0, 0] = init[0, 3] = True
    td = TensorDict({"obs": obs, "is_init": init, "recurrent_state_h": torch.zeros(1, 5, 1, 4), "recurrent_state_c": torch.zeros(1, 5, 1, 4)}, [1, 5])
    with set_recurrent_mode(True):
        out = lstm(td)
    _, (h, _) = lstm.lstm(obs[:, :3])
    assert torch.allclose(out["next", "recurrent_state_h"][0, 2, 0], h[0, 0], atol=1e-6)


def test_4112_sparse_masked_mode_is_an_action_index():
    from torchrl.modules import MaskedCategorical, MaskedOneHotCategorical

    logits, idx = torch.tensor([0.0, 5.0, 3.0, -1.0]), torch.tensor([0, 2])
    d = MaskedCategorical(logits=logits, indices=idx)
    assert int(d.mode) == 2 and torch.isfinite(d.log_prob(d.mode))
    assert MaskedOneHotCategorical(logits=logits, indices=idx).mode.tolist() == [0, 0, 1, 0]


@pytest.mark.slow
@pytest.mark.parametrize("share_params", [True, False])
def test_2902_export_unshared_multiagent_mlp(share_params):
    from torchrl.modules import MultiAgentMLP

    net = MultiAgentMLP(n_agent_inputs=4, n_agent_outputs=2, n_agents=3, centralized=False, share_params=share_params, depth=1, num_cells=8)
    mod = TensorDictModule(net, in_keys=["input"], out_keys=["output"])
    mod.select_out_keys("output")
    x = torch.randn(5, 3, 4)
    exported = torch.export.export(mod, args=(), kwargs={"input": x}, strict=True)
    assert torch.allclose(exported.module()(input=x), mod(input=x), atol=1e-6)


@pytest.mark.parametrize("agent_dim", [1, -3])
def test_3288_custom_agent_dim(agent_dim):
    from torchrl.modules.models.multiagent import MultiAgentNetBase

    class PerAgent(MultiAgentNetBase):
        def __init__(self):
            super().__init__(n_agents=3, centralized=False, share_params=False, agent_dim=agent_dim)

        def _build_single_net(self, *, device=None, **kwargs):
            return nn.Linear(5, 4, device=device)

        def _pre_forward_check(self, inputs):
            return inputs

    net, x = PerAgent(), torch.randn(2, 3, 6, 5)  # agents on dim 1
    y = net(x)
    for i in range(3):
        ref = nn.Linear(5, 4)
        net.params[i].to_module(ref)
        assert torch.allclose(y[:, i], ref(x[:, i]), atol=1e-6)


def test_3519_impala_block_uses_both_resnets():
    from torchrl.modules.models.recipes.impala import _ConvNetBlock

    block = _ConvNetBlock(num_ch=16)
    block(torch.randn(2, 3, 8, 8)).mean().backward()
    assert all(sum(p.grad.abs().sum() for p in r.parameters()) > 0 for r in (block.resnet1, block.resnet2))


# ---------------------------------------------------------------- envs and transforms
def test_3400_stepcounter_truncates_agents_too():
    from torchrl.envs import StepCounter, TransformedEnv

    r = TransformedEnv(_team_env_cls()(), StepCounter(max_steps=3)).rollout(3, break_when_any_done=False)
    assert r["next", "truncated"].squeeze(-1).tolist() == [False, False, True]
    assert r["next", "agents", "truncated"][-1].all() and not r["next", "agents", "truncated"][:-1].any()


@pytest.mark.slow
def test_2958_transformed_parallel_env_resets_only_done_worker():
    import functools

    from torchrl.envs import InitTracker, ParallelEnv, TransformedEnv

    team = _team_env_cls()
    env = TransformedEnv(ParallelEnv(2, [functools.partial(team, 4), functools.partial(team, 6)]), InitTracker())
    try:
        steps = env.rollout(12, break_when_any_done=False)["next", "agents", "observation"][..., 0, 0]
    finally:
        env.close()
    assert steps[0].tolist() == [1, 2, 3, 4] * 3 and steps[1].tolist() == [1, 2, 3, 4, 5, 6] * 2


def test_3237_linearise_rewards_nested_key_in_spec():
    from torchrl.data import Composite, Unbounded
    from torchrl.envs import Compose, EnvBase, LineariseRewards, RewardScaling, TransformedEnv

    class MultiObjective(EnvBase):
        def __init__(self):
            super().__init__()
            self.observation_spec = Composite(observation=Unbounded((2,)))
            self.action_spec, self.reward_spec = Unbounded((1,)), Unbounded((3,))

        def _reset(self, td):
            return TensorDict(observation=torch.zeros(2))

        def _step(self, td):
            return TensorDict(observation=torch.zeros(2), reward=torch.ones(3), done=torch.zeros(1, dtype=B))

        def _set_seed(self, seed):
            pass

    key = ("nested", "scalar_reward")
    env = TransformedEnv(MultiObjective(), Compose(LineariseRewards(in_keys=["reward"], out_keys=[key], weights=[1.0, 2.0, 3.0]),
                                                   RewardScaling(in_keys=[key], loc=0.0, scale=10.0)))
    assert key in env.full_reward_spec.keys(True, True)
    assert env.rollout(2)["next", *key].squeeze(-1).tolist() == [60.0, 60.0]


def test_3260_check_env_specs_extra_state_keys():
    from torchrl.data import Composite, Unbounded
    from torchrl.envs import EnvBase
    from torchrl.envs.utils import check_env_specs

    class WithState(EnvBase):
        def __init__(self):
            super().__init__()
            self.observation_spec = Composite(observation=Unbounded((3,)))
            self.action_spec, self.reward_spec = Unbounded((1,)), Unbounded((1,))
            self.state_spec = Composite(hidden_state=Unbounded((4,)))

        def _reset(self, td):
            return TensorDict(observation=torch.zeros(3), hidden_state=torch.zeros(4))

        def _step(self, td):
            return TensorDict(observation=torch.zeros(3), hidden_state=td["hidden_state"] + 1, reward=torch.zeros(1), done=torch.zeros(1, dtype=B))

        def _set_seed(self, seed):
            pass

    check_env_specs(WithState())


@pytest.mark.parametrize("categorical", [True, False])
def test_3242_action_mask_multidiscrete(categorical):
    """#3242: ActionMask with an nvec-shaped mask over a MultiDiscrete action no longer raises
    (0.11.0, #3342) but the gym env receives one flat index: this board uses its action
    (step() unpacks [row, col]), so the rollout fails there. The test that once stood here
    had an env that ignored its action. More in tests/test_envs_and_transforms_claims.py."""
    from torchrl.envs import ActionMask, GymWrapper, TransformedEnv

    from conftest import FIXTURES, load_module

    board = load_module(FIXTURES / "envs" / "gym_board_flat_action.py")
    env = TransformedEnv(GymWrapper(board.Board("grid"), categorical_action_encoding=categorical), ActionMask())
    assert env.reset()["action_mask"].shape == (5, 5)  # the mask is accepted: no error at reset or when drawing
    assert env.base_env.read_action(env.action_spec.rand()) in (1 * 5 + 2, 3 * 5 + 4)
    with pytest.raises(TypeError, match="object is not iterable"):
        env.rollout(3)


def test_3073_rename_transform_keeps_base_spec():
    from torchrl.envs import GymEnv, RenameTransform, TransformedEnv

    base = GymEnv("Pendulum-v1")
    env = TransformedEnv(base, RenameTransform(in_keys=[], out_keys=[], in_keys_inv=["action"], out_keys_inv=[("stuff", "action")]))
    assert list(env.full_action_spec.keys(True, True)) == [("stuff", "action")]
    assert list(base.full_action_spec.keys(True, True)) == ["action"]
    assert env.rollout(3).shape == (3,) and base.rollout(3).shape == (3,)


# ---------------------------------------------------------------- second sweep (torchrl 0.10 to 0.13 reports)
def test_3870_prefetch_keeps_n_batches_queued():
    from torchrl.data import ListStorage, ReplayBuffer

    for prefetch in (1, 3):
        rb = ReplayBuffer(storage=ListStorage(max_size=100), batch_size=2, prefetch=prefetch)
        rb.extend(torch.arange(100))
        rb.sample()
        assert len(rb._prefetch_queue) == prefetch  # 0.13 left prefetch - 1 batches in flight


def test_3247_save_hook_on_memmap_storage(tmp_path):
    from torchrl.data import Flat2TED, LazyMemmapStorage, ReplayBuffer, TED2Flat

    T = 6
    data = TensorDict({"observation": torch.arange(T + 1.0)[:-1, None], "action": torch.zeros(T, 1),
                       ("next", "observation"): torch.arange(1.0, T + 1)[:, None], ("next", "reward"): torch.ones(T, 1),
                       ("next", "done"): torch.zeros(T, 1, dtype=B), ("next", "terminated"): torch.zeros(T, 1, dtype=B)}, [T])
    rb = ReplayBuffer(storage=LazyMemmapStorage(10))
    rb.register_save_hook(TED2Flat())  # AttributeError on LazyMemmapStorage before 0.11
    rb.extend(data)
    rb.dumps(tmp_path)
    back = ReplayBuffer(storage=LazyMemmapStorage(10))
    back.register_load_hook(Flat2TED())
    back.loads(tmp_path)
    assert torch.equal(back[:]["next", "observation"], data["next", "observation"])


def test_3036_multistep_transform_single_items():
    from torchrl.data import LazyTensorStorage, ReplayBuffer
    from torchrl.envs.transforms import MultiStepTransform

    def step(i):
        nxt = {"observation": torch.full((4,), i + 1.0), "reward": torch.ones(1), "done": torch.zeros(1, dtype=B)}
        return TensorDict({"observation": torch.full((4,), float(i)), "next": nxt}, [])

    for how in ("add", "extend"):
        rb = ReplayBuffer(storage=LazyTensorStorage(100), transform=MultiStepTransform(n_steps=3, gamma=0.5))
        lengths = []
        for i in range(6):
            rb.add(step(i)) if how == "add" else rb.extend(step(i).unsqueeze(0))
            lengths.append(len(rb))
        stored = rb[:]
        assert lengths == [0, 0, 0, 1, 2, 3] and stored["observation"].shape == (3, 4)  # before 0.10: an empty first write
        assert stored["next", "observation"][:, 0].tolist() == [3.0, 4.0, 5.0]
        assert stored["next", "reward"].squeeze(-1).tolist() == [1.75] * 3


def test_3804_evaluator_keeps_policy_state_dict():
    from torchrl.collectors import Evaluator
    from torchrl.envs import GymEnv

    policy = TensorDictModule(nn.Linear(4, 2), ["observation"], ["action"])
    evaluator = Evaluator(lambda: GymEnv("CartPole-v1"), policy, max_steps=5, num_trajectories=1)
    try:
        result = evaluator.evaluate(TensorDict.from_module(policy).data)
    finally:
        evaluator.shutdown()
    assert result["eval/num_episodes"] == 1
    assert sorted(policy.state_dict()) == ["module.bias", "module.weight"]  # emptied before 0.13


def test_3599_csv_logger_mp4_needs_torchcodec_not_torchvision(tmp_path):
    import importlib.util

    from torchrl.record import CSVLogger

    if importlib.util.find_spec("torchcodec") is not None:
        pytest.skip("torchcodec is installed: the mp4 path writes a file here")
    logger = CSVLogger(exp_name="r", log_dir=str(tmp_path), video_format="mp4")
    with pytest.raises(ModuleNotFoundError, match="requires torchcodec"):
        logger.log_video("v", torch.zeros(1, 2, 3, 4, 4, dtype=torch.uint8), step=0)


@pytest.mark.parametrize("share_params", [True, False])
def test_3315_custom_centralized_net_must_flatten_agents(share_params):
    from torchrl.modules.models.multiagent import MultiAgentNetBase

    class Net(MultiAgentNetBase):
        def __init__(self, centralized, flatten):
            self.flatten = flatten
            super().__init__(n_agents=3, centralized=centralized, share_params=share_params, agent_dim=-2, device=None)

        def _build_single_net(self, *, device, **kwargs):
            return nn.Linear(2 * self.n_agents if self.flatten else 2, 4, device=device)

        def _pre_forward_check(self, inputs):
            return inputs.flatten(-2, -1) if self.flatten else inputs  # all agents' inputs as one vector

    x = torch.randn(5, 3, 2)
    assert Net(False, False)(x).shape == (5, 3, 4)
    assert Net(True, False)(x).shape == (5, 3, 3, 4)  # each agent's net saw [*B, 3, 2]: a second agent dim, no error
    assert Net(True, True)(x).shape == (5, 3, 4)


def test_2939_ppo_composite_tensor_log_prob_warns_and_runs():
    from tensordict.nn import CompositeDistribution, TensorDictSequential, set_composite_lp_aggregate

    from torchrl.modules import ProbabilisticActor, ValueOperator
    from torchrl.objectives import ClipPPOLoss

    n = 6
    heads = TensorDictModule(lambda r: (r[..., :3], r[..., 3:4], r[..., 4:5].exp()), ["raw"],
                             [("params", "a", "logits"), ("params", "b", "loc"), ("params", "b", "scale")])
    with set_composite_lp_aggregate(True):  # the log-prob is one tensor, "sample_log_prob"
        actor = ProbabilisticActor(TensorDictSequential(TensorDictModule(nn.Linear(3, 5), ["observation"], ["raw"]), heads),
                                   in_keys=["params"], out_keys=["a", "b"], distribution_class=CompositeDistribution,
                                   distribution_kwargs={"distribution_map": {"a": torch.distributions.Categorical,
                                                                             "b": torch.distributions.Normal}},
                                   return_log_prob=True)
        td = TensorDict({"observation": torch.randn(n, 3)}, [n])
        with torch.no_grad():
            actor(td)
        z = torch.zeros(n, 1, dtype=B)
        td["next"] = TensorDict({"observation": torch.randn(n, 3), "reward": torch.randn(n, 1), "done": z, "terminated": z}, [n])
        loss = ClipPPOLoss(actor, ValueOperator(nn.Linear(3, 1), in_keys=["observation"]))
        with pytest.raises(TypeError, match="NoneType"):
            loss(td.clone())  # the default action key names no head: the loss scores None
        loss.set_keys(action=["a", "b"])
        with pytest.warns(UserWarning, match="composite distribution, yet your log-probability is a tensor"):
            out = loss(td)  # 0.8 raised AttributeError ('Tensor' has no batch_size) before this warning
    assert torch.isfinite(out["loss_objective"])


def test_3409_composite_encode_keeps_batch_size():
    from torchrl.data import Bounded, Composite

    spec = Composite(obs=Bounded(torch.zeros(2, 3), torch.ones(2, 3)), shape=(2,))
    assert spec.encode({"obs": spec.rand()["obs"].numpy()}).batch_size == (2,)  # () before 0.12


def test_3139_composite_shape_is_keyword_only():
    from torchrl.data import Composite, Unbounded

    obs = Unbounded((3, 4))
    with pytest.raises(RuntimeError, match="Got multiple arguments"):
        Composite({"observation": obs}, torch.Size([3]))
    assert Composite(agents=Composite({"observation": obs}, shape=(3,)))["agents"].shape == (3,)


# ---------------------------------------------------------------- the table
TABLE = BUNDLE / "tests" / "public_reports.md"
MIN_ROWS, MIN_VERIFIED = 82, 65


def _table_rows(path):
    rows = []
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and re.fullmatch(r"\[?#\d+\]?.*", cells[0]):
            rows.append(dict(zip(("report", "title", "area", "status", "covered", "proof"), cells)))
    return rows


def _table_problems(path, min_rows=MIN_ROWS, min_verified=MIN_VERIFIED):
    """Problems of the sweep table at ``path``: too few rows, a report listed twice, an unknown
    status, an entry id missing from the index, a proving test that does not exist."""
    import sys

    from torchrl_skill.explain import error_index as ei

    ids, rows, problems = ei.by_id(), _table_rows(path), []
    verified = [r for r in rows if not r["proof"].startswith("not verified")]
    counted = [r for r in verified if "pre-0.8" not in r["title"]]
    if len(rows) < min_rows or len(counted) < min_verified:
        problems.append(f"{len(rows)} rows, {len(counted)} verified of torchrl 0.8 or later")
    numbers = [re.search(r"\d+", r["report"]).group(0) for r in rows]
    problems += [f"#{n} listed twice" for n in sorted(set(numbers)) if numbers.count(n) > 1]
    for row in rows:
        if row["status"].split()[0] not in {"yes", "no", "fixed", "n/a", "not"}:
            problems.append(f"{row['report']}: status {row['status']!r}")
        problems += [f"{row['report']}: no entry {e}" for e in re.findall(r"`([a-z0-9]+(?:-[a-z0-9]+)+)`", row["covered"]) if e not in ids]
        if row in verified:
            rel, _, func = row["proof"].strip("`").partition("::")
            src = BUNDLE / rel
            names = {n.name for n in ast.walk(ast.parse(src.read_text())) if isinstance(n, ast.FunctionDef)} if src.is_file() else set()
            if func.split("[")[0] not in names:
                problems.append(f"{row['report']}: proof {row['proof']} does not exist")
    return problems


@pytest.mark.slow
def test_public_reports_table():
    assert _table_problems(TABLE) == []


def test_public_reports_table_rejects_bad_rows(tmp_path):
    bad = tmp_path / "t.md"
    bad.write_text("| #1 | t | a | maybe | `no-such-entry` | `tests/test_public_reports.py::test_missing` |\n"
                   "| #1 | t | a | yes | none | not verified: x |\n")
    found = " ".join(_table_problems(bad))
    for text in ("rows", "listed twice", "status 'maybe'", "no entry no-such-entry", "does not exist"):
        assert text in found, (text, found)
