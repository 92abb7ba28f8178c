"""Claims of collectors-and-replay/references/collectors.md, each shown on its case and on
the nearest case it excludes (the claims sweep, tests/README.md).

MultiSyncCollector's ``cat_results``: the signature's default is None and 0.14.1's
iterator treats None as "stack" (torchrl/collectors/_multi_sync.py); the reference said
"concatenates", which is what ``cat_results=0`` does.
"""

from __future__ import annotations

import inspect
import json

import pytest
from conftest import FIXTURES, run_python


@pytest.mark.slow
def test_multisync_default_stacks_workers_and_cat0_concatenates():
    from torchrl.collectors import MultiSyncCollector

    assert inspect.signature(MultiSyncCollector.__init__).parameters["cat_results"].default is None
    proc = run_python([str(FIXTURES / "collectors" / "multisync_cat_results.py")], timeout=900)
    seen = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            seen[row.pop("case")] = row
    assert len(seen) == 5, (proc.stdout[-2000:], proc.stderr[-3000:])
    # the default stacks along a new first dim: one row per worker, not 12 frames in a row
    assert seen["same-envs-default"] == {"batch_size": [2, 6], "type": "TensorDict"}
    assert seen["same-envs-cat0"] == {"batch_size": [12], "type": "TensorDict"}
    # workers of different batch sizes but the same batch dims: a lazy stack, no error
    assert seen["batch-sizes-differ-default"] == {"batch_size": [2, -1, -1], "type": "LazyStackedTensorDict"}
    assert seen["batch-sizes-differ-cat-1"]["error"].startswith("RuntimeError: Sizes of tensors must match")
    # different batch dims (an unbatched env and a SerialEnv): the default stack raises
    assert "Lazy stacking of tensordicts requires them to have congruent batch dimensions" in \
        seen["batch-dims-differ-default"]["error"]


def test_batched_env_batches_round_frames_up():
    """collectors.md#one-collector: a batched env gives [num_envs, T] with T rounded up, so a
    batch can hold more than frames_per_batch frames; an even split gives exactly that many."""
    from torchrl.collectors import Collector
    from torchrl.envs import PendulumEnv, SerialEnv

    for num_envs, frames, shape in [(3, 10, (3, 4)), (2, 10, (2, 5))]:
        collector = Collector(SerialEnv(num_envs, PendulumEnv), None, frames_per_batch=frames, total_frames=frames)
        try:
            assert next(iter(collector)).batch_size == shape
        finally:
            collector.shutdown()


@pytest.mark.slow
def test_workers_spawn_unless_a_start_method_was_set():
    """collectors.md#worker-processes: torchrl 0.14.1 starts collector and ParallelEnv workers
    with spawn unless the program set a start method (then that one). Read in fresh
    interpreters through torchrl's own chooser (torchrl._utils._get_default_mp_start_method)."""
    code = ("import torch.multiprocessing as mp\n{set}\nfrom torchrl._utils import _get_default_mp_start_method as f\nprint(f())")
    for set_line, expected in [("", "spawn"), ("mp.set_start_method('fork')", "fork"), ("mp.set_start_method('forkserver')", "forkserver")]:
        proc = run_python(["-c", code.format(set=set_line)], timeout=300)
        assert proc.stdout.split()[-1:] == [expected], (set_line, proc.stdout, proc.stderr[-500:])
