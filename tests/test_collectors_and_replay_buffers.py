"""smoke_replay_buffer.py and the replay-buffer claims of collectors-and-replay, on real
torchrl 0.14.1 buffers filled by real collectors.

The broken and fixed buffer layouts of the slice checks are collected here, independently
of the script's own builder: one-step batches of SerialEnv(2, PendulumEnv) flattened with
reshape(-1) (the envs interleave), the same batches in an ndim=2 storage, and
Collector(trajs_per_batch=..., replay_buffer=rb); each saved with rb.dumps(DIR).
"""

from __future__ import annotations

import json

import pytest
from torchrl_skill.report import skill_report as sr
from conftest import FIXTURES, load_module, run_in_process, run_main

SCRIPT = "collectors-and-replay/smoke_replay_buffer"
TRAJ_IDS = ("collector", "traj_ids")


def smoke_replay_buffer():
    return load_module(SCRIPT)


def one_step_batches(frames: int = 40, traj_len: int = 5, **collector_kwargs):
    """Collect ``frames`` frames from SerialEnv(2, PendulumEnv), two per batch ([2, 1])."""
    import torch
    from torchrl.collectors import Collector
    from torchrl.envs import PendulumEnv, SerialEnv

    torch.manual_seed(0)
    collector = Collector(SerialEnv(2, PendulumEnv), None, frames_per_batch=2, total_frames=frames,
                          max_frames_per_traj=traj_len, **collector_kwargs)
    try:
        return [b for b in collector]
    finally:
        collector.shutdown()


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    """``{"interleaved" | "ndim2" | "trajs_per_batch": dumps DIR}``."""
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    root = tmp_path_factory.mktemp("layouts")
    flat, by_env, whole = (ReplayBuffer(storage=LazyTensorStorage(40, ndim=n)) for n in (1, 2, 1))
    for batch in one_step_batches():
        assert batch.batch_size == (2, 1)
        flat.extend(batch.reshape(-1))
        by_env.extend(batch)
    one_step_batches(trajs_per_batch=2, replay_buffer=whole)
    out = {}
    for name, rb in (("interleaved", flat), ("ndim2", by_env), ("trajs_per_batch", whole)):
        out[name] = root / name
        rb.dumps(out[name])
    return out


# ------------------------------------------------------------------------- --dumps


def test_dumps_check_fails_interleaved_storage_and_passes_the_fixed_layouts(layouts):
    """Issue: the script passed a SliceSampler over interleaved storage. Now --dumps fails it,
    naming the real sampler error, the interleaving and the fix, and passes both fixes."""
    status, detail = run_in_process(SCRIPT, "--dumps", str(layouts["interleaved"]), "--slice-len", "4")["layout:slice-trajectories"]
    assert status == "fail", detail
    assert "length range: 1 - 1" in detail and "split" in detail
    assert "ndim=2" in detail and "trajs_per_batch" in detail
    for name in ("ndim2", "trajs_per_batch"):
        status, detail = run_in_process(SCRIPT, "--dumps", str(layouts[name]), "--slice-len", "4")["layout:slice-trajectories"]
        assert status == "pass" and "0 split" in detail and "4 slices of 4" in detail, (name, detail)


def test_dumps_check_fails_when_trajectories_are_too_short(layouts):
    status, detail = run_in_process(SCRIPT, "--dumps", str(layouts["ndim2"]), "--slice-len", "8")["layout:slice-trajectories"]
    assert status == "fail" and "Did not find a single trajectory with sufficient length" in detail, detail


def test_dumps_check_names_a_missing_trajectory_key(layouts):
    status, detail = run_in_process(SCRIPT, "--dumps", str(layouts["ndim2"]), "--traj-key", "episode")["layout:slice-trajectories"]
    assert status == "fail" and "'episode'" in detail and "--traj-key" in detail, detail


@pytest.mark.parametrize("argv, says", [
    (["--dumps", "no/such/dir"], "does not exist"),
    (["--dumps", str(FIXTURES / "collectors" / "slice_short_trajectories.json")], "is a file"),
    (["--dumps", str(FIXTURES / "collectors")], "storage_metadata.json"),
    (["--batch-size", "7"], "--batch-size"),
    (["--slice-len", "0"], "--slice-len"),
])
def test_bad_input_exits_2_with_one_line(argv, says, capsys):
    code, report = run_main(SCRIPT, *argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert (code, report) == (2, {})
    assert len(err) == 1 and says in err[0] and "fix:" in err[0], err


# ------------------------------------------------------------------------- default run


def test_replay_buffer_all_checks_pass_and_report_samples():
    rows = run_in_process(SCRIPT)
    assert {s for s, _ in rows.values()} == {"pass"}, rows
    assert "strict_length=False -> 74 items" in rows["sampler:slice"][1]
    assert "reshape(-1) -> 6 trajectories split" in rows["sampler:slice-layout"][1]
    assert "priorities kept" in rows["checkpoint:dumps-loads"][1]


def test_selection_runs_only_the_asked_checks():
    rows = run_in_process(SCRIPT, "--storage", "memmap", "--sampler", "slice")
    assert sorted(n for n in rows if n.split(":")[0] in ("storage", "sampler")) == ["sampler:slice", "storage:memmap"]


def test_slice_sampler_short_batch_and_pad_output_fix():
    """strict_length=False returns fewer items than asked; pad_output=True the full batch and a mask."""
    rb = smoke_replay_buffer()
    fx = json.loads((FIXTURES / "collectors" / "slice_short_trajectories.json").read_text())
    lengths, slice_len, batch = fx["lengths"], fx["slice_len"], fx["batch_size"]
    n_strict, _, contiguous = rb.sample_slices(lengths, slice_len, batch)
    assert n_strict == batch and contiguous
    n_loose, _, _ = rb.sample_slices(lengths, slice_len, batch, strict_length=False)
    assert n_loose < batch
    n_pad, n_real, _ = rb.sample_slices(lengths, slice_len, batch, strict_length=False, pad_output=True)
    assert n_pad == batch and n_real < batch
    with pytest.raises(RuntimeError, match="Did not find a single trajectory with sufficient length"):
        rb.sample_slices(fx["all_short"], slice_len, 20)


def test_slice_check_fails_when_no_trajectory_is_short(monkeypatch):
    rb = smoke_replay_buffer()
    monkeypatch.setattr(rb, "TRAJ_LENGTHS", (30, 30, 40))
    with pytest.raises(sr.CheckFailed, match="strict_length=False returned the full"):
        rb.check_slice(20)


# ------------------------------------------------------------------------- claims


def test_end_key_slices_mix_envs_over_interleaved_storage():
    """Over interleaved storage, SliceSampler(end_key=...) raises nothing and returns slices
    that alternate between the envs; with no key it uses ("collector", "traj_ids") and raises;
    strict_length=False returns one-step slices (the troubleshooting entries)."""
    import torch
    from torchrl.data import LazyTensorStorage, ReplayBuffer, SliceSampler

    batches = one_step_batches()

    def buffer(**sampler_kwargs):
        rb = ReplayBuffer(storage=LazyTensorStorage(40), sampler=SliceSampler(slice_len=4, **sampler_kwargs))
        for batch in batches:
            rb.extend(batch.reshape(-1))
        return rb

    torch.manual_seed(0)
    slices = buffer(end_key=("next", "done")).sample(16)[TRAJ_IDS].reshape(4, 4)
    assert all(row.unique().numel() == 2 for row in slices), slices.tolist()
    with pytest.raises(RuntimeError, match=r"length range: 1 - 1 /"):
        buffer().sample(16)
    short = buffer(traj_key=TRAJ_IDS, strict_length=False).sample(16)
    assert short.batch_size[0] == 4, short.batch_size  # 4 slices of one step


def test_tensordict_replay_buffer_ndim2_refuses_one_step_writes():
    """TensorDictReplayBuffer over an ndim=2 storage raises on [2, 1] writes; [2, 2] goes
    through; a plain ReplayBuffer takes [2, 1] (the interleaving fix's caveat)."""
    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, ReplayBuffer, TensorDictReplayBuffer

    def write(cls, steps):
        cls(storage=LazyTensorStorage(20, ndim=2)).extend(TensorDict({"obs": torch.zeros(2, steps)}, batch_size=[2, steps]))

    with pytest.raises(RuntimeError, match="tensor shape is incompatible with dest shape"):
        write(TensorDictReplayBuffer, 1)
    write(TensorDictReplayBuffer, 2)
    write(ReplayBuffer, 1)


def test_priorities_come_back_only_through_dumps_and_loads(tmp_path):
    """Re-extending saved data gives uniform priorities; a storage restored alone raises
    "non-positive p_sum"; rb.dumps/rb.loads restores them."""
    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer

    def make():
        return TensorDictPrioritizedReplayBuffer(alpha=1.0, beta=0.4, storage=LazyTensorStorage(100), batch_size=200)

    def share_of_3(rb):
        return float((rb.sample()["index"] == 3).float().mean())

    torch.manual_seed(0)
    rb = make()
    index = rb.extend(TensorDict({"obs": torch.arange(60.0)}, batch_size=[60]))
    priority = torch.full((60,), 1e-6)
    priority[3] = 1.0
    rb.update_priority(index, priority)
    assert share_of_3(rb) > 0.9
    re_extended = make()
    re_extended.extend(rb[:60].exclude("index", "priority_weight"))
    assert share_of_3(re_extended) < 0.2
    rb.storage.dumps(tmp_path / "storage_only")
    storage_only = make()
    storage_only.storage.loads(tmp_path / "storage_only")
    with pytest.raises(RuntimeError, match="non-positive p_sum"):
        storage_only.sample()
    rb.dumps(tmp_path / "whole")
    restored = make()
    restored.loads(tmp_path / "whole")
    assert share_of_3(restored) > 0.9
