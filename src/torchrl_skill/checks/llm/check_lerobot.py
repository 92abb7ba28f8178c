"""Run TorchRL's LeRobot path for real on a LeRobot dataset built here; nothing downloaded.

Needs the LeRobot stack of requirements-lerobot.txt (lerobot 0.6.1 on Python >= 3.12, torch
2.11.0, torchrl 0.14.1) in its own venv: `bash .ci/run_lerobot` builds it. Where lerobot is not
installed every row is MISSING (exit 0). In that env it writes a 2-episode LeRobotDataset
(state, an 8x8 camera image, action, a task string per episode) with
``LeRobotDataset.create`` / ``add_frame`` / ``save_episode`` in a temporary folder, then checks:
the frames lerobot reads back are the ones written; TorchRL's own LeRobot path
(``LeRobotExperienceReplay.from_columns`` over the dataset's columns) maps them to the
canonical VLA keys row for row; ``validate_vla_tensordict`` accepts them and rejects the
same rows without ``action``; ``ActionChunkTransform`` on slices the buffer's
``SliceSampler`` draws gives ``a[t..t+H-1]`` inside one episode, padded past the slice; the
action tokenizers round-trip the dataset's actions within half a bin; a plain
``ReplayBuffer`` stores and samples the rows unchanged. The temporary folder is removed.
"""

from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path

from torchrl_skill.report import skill_report as sr  # noqa: E402

EXAMPLE = "python $SKILL_DIR/sub-skills/llm-vla-and-services/scripts/check_lerobot.py --json"
INSTALL = ("lerobot is not installed: build its own venv from requirements-lerobot.txt (bash .ci/run_lerobot, or the "
           "steps in that file's comments: Python >= 3.12) and run this script with that venv's python")
EPISODES, FRAMES, STATE_DIM, ACTION_DIM, IMAGE = 2, 6, 4, 3, 8  # 12 frames, 8x8 RGB
SLICE, CHUNK = 4, 3  # slice length the sampler draws, chunk horizon H
TASKS = ["pick the block", "place the block"]


def build_parser():
    return sr.make_parser(__doc__, EXAMPLE)


def _frame(ep: int, i: int) -> dict:
    """Frame ``i`` of episode ``ep``: values that name their own position, so any row read back
    in the wrong place or order shows."""
    import numpy as np

    k = ep * FRAMES + i
    return {"observation.state": np.arange(STATE_DIM, dtype=np.float32) + k,
            "observation.images.top": np.full((IMAGE, IMAGE, 3), 10 * k, np.uint8),
            "action": (np.arange(ACTION_DIM, dtype=np.float32) - 1 + k / 12) / 2,  # inside [-1, 1], the tokenizers' range
            "task": TASKS[ep]}


def check_stack() -> str:
    """What this env runs, and the cost of its torch: torchrl's compiled extension."""
    import lerobot
    import torch
    import torchrl
    from torchrl.data import LazyTensorStorage, PrioritizedReplayBuffer

    try:
        PrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(4))
        prio = "prioritized replay works"
    except Exception as err:  # torchrl 0.14.1's extension is built for torch 2.14; lerobot 0.6.1 pins torch < 2.12
        prio = f"prioritized replay unavailable ({sr.first_line(err)[:100]})"
    sr.evidence(1, "stack")
    return f"lerobot {lerobot.__version__}, torch {torch.__version__}, torchrl {torchrl.__version__}; {prio}"


def check_dataset(scratch) -> sr.Passed:
    """Write the dataset with lerobot's own API; read every frame back through ``dataset[i]``."""
    import numpy as np
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    features = {
        "observation.state": {"dtype": "float32", "shape": (STATE_DIM,), "names": None},
        "observation.images.top": {"dtype": "image", "shape": (IMAGE, IMAGE, 3), "names": ["height", "width", "channels"]},
        "action": {"dtype": "float32", "shape": (ACTION_DIM,), "names": None},
    }
    ds = LeRobotDataset.create("local/tiny", fps=10, features=features, root=Path(scratch) / "tiny", use_videos=False)
    for ep in range(EPISODES):
        for i in range(FRAMES):
            ds.add_frame(_frame(ep, i))
        ds.save_episode()
    ds.finalize()
    sr.expect((ds.num_episodes, ds.num_frames) == (EPISODES, EPISODES * FRAMES),
              f"lerobot reports {ds.num_episodes} episodes / {ds.num_frames} frames, {EPISODES} / {EPISODES * FRAMES} written")
    for k in range(ds.num_frames):
        row, want = ds[k], _frame(*divmod(k, FRAMES))
        image = row["observation.images.top"]  # lerobot returns [C, H, W] float in [0, 1]
        sr.expect(np.allclose(row["observation.state"].numpy(), want["observation.state"])
                  and np.allclose(row["action"].numpy(), want["action"]) and row["task"] == want["task"]
                  and abs(float(image.mean()) * 255 - float(want["observation.images.top"].mean())) < 1,
                  f"frame {k} read back differs from the frame written")
    sr.evidence(ds.num_frames, "frames read back")
    return sr.Passed(f"LeRobotDataset.create + add_frame/save_episode: {ds.num_episodes} episodes, {ds.num_frames} frames "
                     f"(format {getattr(ds.meta.info, 'codebase_version', '?')}), every frame read back as written", ds)


def lerobot_columns(ds) -> dict:
    """The dataset's columns as ``LeRobotExperienceReplay.from_columns`` takes them: tensors per
    numeric column (images ``[N, C, H, W]`` float, as lerobot decodes them) and the task string
    per frame joined from ``task_index`` (torchrl 0.14.1 data/datasets/lerobot.py does the same
    join for hub snapshots)."""
    import torch

    rows = [ds[k] for k in range(ds.num_frames)]
    out = {name: torch.stack([r[name] for r in rows]) for name in rows[0] if torch.is_tensor(rows[0][name])}
    out["task"] = [r["task"] for r in rows]
    return out


def check_torchrl_load(dataset) -> sr.Passed:
    """TorchRL's LeRobot path maps the columns to the canonical VLA keys, row for row."""
    import torch
    from torchrl.data.datasets import LeRobotExperienceReplay

    columns = lerobot_columns(dataset)
    rb = LeRobotExperienceReplay.from_columns(columns, batch_size=SLICE * 2, slice_len=SLICE)
    data = rb[:]
    checks = {("observation", "state"): "observation.state", "action": "action", "episode": "episode_index",
              ("observation", "image", "top"): "observation.images.top", "frame": "frame_index"}
    for key, column in checks.items():
        sr.expect(torch.equal(data.get(key), columns[column]), f"{key} is not the column {column!r} row for row")
    sr.expect(data.get("language_instruction").tolist() == columns["task"], "language_instruction is not the task column")
    sr.evidence(len(rb) * (len(checks) + 1), "values compared")
    return sr.Passed(f"LeRobotExperienceReplay.from_columns: {len(rb)} rows; {', '.join(map(str, checks))} and "
                     "language_instruction equal lerobot's columns row for row", rb)


def check_vla_schema(buffer) -> str:
    """``validate_vla_tensordict`` accepts the mapped rows and names the fault in the same rows
    without ``action`` (a check that cannot fail proves nothing)."""
    from torchrl.data.vla import validate_vla_tensordict

    data = buffer[:]
    problems = validate_vla_tensordict(data, raise_on_error=False)
    sr.expect(not problems, f"validate_vla_tensordict: {'; '.join(problems)}")
    broken = validate_vla_tensordict(data.exclude("action"), raise_on_error=False)
    sr.expect(bool(broken), "validate_vla_tensordict accepted the rows without 'action': it checks nothing here")
    sr.evidence(len(data), "rows validated")
    return f"validate_vla_tensordict: no problem in {len(data)} rows; without 'action' it says {broken[0]!r}"


def check_action_chunks(buffer) -> str:
    """Slices from the buffer's SliceSampler, chunked by ActionChunkTransform, against the
    dataset's own actions: chunk ``[t, h]`` is ``a[t+h]`` of the same episode inside the slice,
    the slice's last action repeated and ``action_is_pad`` set past it."""
    import torch
    from torchrl.envs.transforms import ActionChunkTransform

    actions, episodes, frames = (buffer[:].get(k) for k in ("action", "episode", "frame"))
    chunker = ActionChunkTransform(CHUNK, done_key=None)
    torch.manual_seed(0)
    compared = 0
    for _ in range(3):
        sample = buffer.sample().reshape(-1, SLICE)  # [slices, SLICE]: SliceSampler returns slices back to back
        out = chunker(sample.clone())
        chunk, pad = out.get(("vla_action", "chunk")), out.get("action_is_pad")
        sr.expect(tuple(chunk.shape) == (sample.shape[0], SLICE, CHUNK, ACTION_DIM),
                  f"('vla_action', 'chunk') has shape {tuple(chunk.shape)}, not [slices, {SLICE}, {CHUNK}, {ACTION_DIM}]")
        for s in range(sample.shape[0]):
            ep, fr = sample[s].get("episode"), sample[s].get("frame")
            sr.expect(bool((ep == ep[0]).all()) and bool((fr.diff() == 1).all()),
                      f"slice {s} crosses an episode boundary or skips frames: episodes {ep.tolist()}, frames {fr.tolist()}")
            for t in range(SLICE):
                for h in range(CHUNK):
                    j = min(t + h, SLICE - 1)  # past the slice: the last action repeated
                    row = int(((episodes == ep[0]) & (frames == fr[j])).nonzero()[0])
                    sr.expect(torch.allclose(chunk[s, t, h], actions[row]) and bool(pad[s, t, h]) == (t + h >= SLICE),
                              f"slice {s}, step {t}, chunk {h}: not the dataset's action of frame {int(fr[j])}")
                    compared += 1
    sr.evidence(compared, "chunk entries compared")
    return (f"ActionChunkTransform({CHUNK}) on SliceSampler slices of {SLICE} frames: {compared} chunk entries equal the "
            "dataset's a[t+h] within one episode; action_is_pad exactly past each slice's end")


def check_action_tokenizers(buffer) -> str:
    """The dataset's actions through UniformActionTokenizer and VocabTailActionTokenizer."""
    from torchrl.data.vla import UniformActionTokenizer, VocabTailActionTokenizer

    actions = buffer[:].get("action")
    rows = []
    for tok, half_bin in ((UniformActionTokenizer(256, low=-1.0, high=1.0, action_dim=ACTION_DIM), 1 / 256),
                          (VocabTailActionTokenizer(256, full_vocab_size=32000), 1 / 255)):
        ids = tok.encode(actions)
        err = float((tok.decode(ids) - actions).abs().max())
        sr.expect(err <= half_bin + 1e-6, f"{type(tok).__name__}: round-trip error {err:.4g} > half a bin ({half_bin:.4g})")
        rows.append(f"{type(tok).__name__} ids {int(ids.min())}..{int(ids.max())}, max error {err:.2e} <= {half_bin:.2e}")
    sr.evidence(actions.numel() * 2, "action values round-tripped")
    return f"{actions.shape[0]} actions: " + "; ".join(rows)


def check_replay_buffer(buffer) -> str:
    """Store the mapped rows in a plain ReplayBuffer and sample them back: each sampled row is
    the stored one at the index the sampler reports."""
    import torch
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    data = buffer[:].exclude("language_instruction")  # strings stay in the LeRobot buffer's storage
    rb = ReplayBuffer(storage=LazyTensorStorage(len(data)), batch_size=8)
    rb.extend(data)
    torch.manual_seed(0)
    sample, info = rb.sample(return_info=True)
    index = info["index"]
    for key in (("observation", "state"), "action", ("observation", "image", "top")):
        sr.expect(torch.equal(sample.get(key), data.get(key)[index]), f"sampled {key} differs from the stored rows")
    sr.evidence(len(index), "sampled rows compared")
    return f"ReplayBuffer(LazyTensorStorage({len(data)})): {len(rb)} rows stored; {len(index)} sampled rows equal the stored ones"


CHECKS = [
    sr.Check("lerobot:stack", check_stack, proves="the LeRobot stack imports"),
    sr.Check("lerobot:dataset", check_dataset, gives="dataset", proves="a LeRobotDataset written here reads back as written"),
    sr.Check("lerobot:torchrl-load", check_torchrl_load, gives="buffer", proves="TorchRL's LeRobot path maps every row"),
    sr.Check("lerobot:vla-schema", check_vla_schema, proves="the rows follow the canonical VLA schema"),
    sr.Check("lerobot:action-chunks", check_action_chunks, proves="action chunks are the dataset's future actions"),
    sr.Check("lerobot:action-tokenizers", check_action_tokenizers, proves="action tokenizers round-trip the actions"),
    sr.Check("lerobot:replay-buffer", check_replay_buffer, proves="a replay buffer stores and samples the rows"),
]


def run_checks(args, report) -> None:
    if importlib.util.find_spec("lerobot") is None:
        report.add(CHECKS[0].name, "missing", INSTALL)
        for check in CHECKS[1:]:
            report.add(check.name, "missing", "needs lerobot (requirements-lerobot.txt; see lerobot:stack)")
        return
    import os

    with tempfile.TemporaryDirectory(prefix="torchrl-skill-lerobot-") as scratch:
        # lerobot reads its parquet files through `datasets`, which caches (and leaves lock files)
        # under HF_HOME: every Hugging Face cache goes in the scratch folder, and nothing may reach the hub
        hf = {"HF_HOME": f"{scratch}/hf", "HF_DATASETS_CACHE": f"{scratch}/hf/datasets", "HF_HUB_OFFLINE": "1",
              "HF_DATASETS_OFFLINE": "1"}
        before = {k: os.environ.get(k) for k in hf}
        os.environ.update(hf)
        try:
            sr.run_declared(CHECKS, report, args=args, scratch=scratch)
        finally:
            for k, v in before.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def main(argv=None):
    return sr.standard_main(__file__, build_parser, run_checks, argv)
