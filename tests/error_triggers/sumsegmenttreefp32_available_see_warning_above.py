"""RuntimeError: SumSegmentTreeFp32 is not available: torchrl's compiled extension did not
load (here: hidden, as an ABI mismatch leaves it), then a PrioritizedReplayBuffer is built."""

SUBPROCESS = "cold"  # hides what a warm interpreter imported already


def trigger():
    import sys

    sys.modules["torchrl._torchrl"] = None  # what an extension built for another torch amounts to
    from torchrl.data import LazyTensorStorage, PrioritizedReplayBuffer

    PrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(10))
