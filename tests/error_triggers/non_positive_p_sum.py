"""A prioritized buffer whose storage was restored alone (rb.storage.loads): no priorities."""


def trigger():
    import tempfile
    from pathlib import Path

    import torch
    from tensordict import TensorDict
    from torchrl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer

    def make():
        return TensorDictPrioritizedReplayBuffer(alpha=1.0, beta=0.4, storage=LazyTensorStorage(100), batch_size=16)

    rb = make()
    rb.extend(TensorDict({"obs": torch.arange(60.0)}, batch_size=[60]))
    with tempfile.TemporaryDirectory() as tmp:
        rb.storage.dumps(Path(tmp))
        restored = make()
        restored.storage.loads(Path(tmp))
    restored.sample()
