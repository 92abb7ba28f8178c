"""A second LazyMemmapStorage writing into a scratch_dir that already holds a buffer's files
(pytorch/rl#2437, torchrl 0.14.1)."""

import shutil
import tempfile

import torch
from tensordict import TensorDict


def trigger():
    from torchrl.data import LazyMemmapStorage, ReplayBuffer

    scratch = tempfile.mkdtemp()
    try:
        data = TensorDict({"a": torch.zeros(3, 4)}, [3])
        ReplayBuffer(storage=LazyMemmapStorage(100, scratch_dir=scratch)).extend(data)
        ReplayBuffer(storage=LazyMemmapStorage(100, scratch_dir=scratch)).extend(data)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
