"""torch's intra-op thread count pinned for a block, restored after."""

from __future__ import annotations

import contextlib
from typing import Iterator


@contextlib.contextmanager
def torch_threads(n: int = 1) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(n)``; the previous count comes back after,
    whatever the block raised. A tiny model gains nothing from a second thread: on the LLM
    smokes one thread was 2-5x faster on 2 busy cores (smoke_llm_grpo.py, measured)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
