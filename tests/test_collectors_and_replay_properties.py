"""Behaviours of collectors-and-replay/references/*.md that span several steps, proven over
several steps on generated configurations (Hypothesis), not on one example.

- replay-buffers.md: ``extend`` writes along ``dim_extend`` (default ``ndim - 1``, time): an
  ``ndim=2`` storage holds ``[T, num_envs]``; ``dim_extend=0`` keeps ``[num_envs, T]``. Checked
  over 1-4 extends of generated shapes, the storage's content against the batches written.
- collectors.md#worker-processes: how MultiSyncCollector joins its workers' batches, over
  generated worker layouts and 2-3 batches each (tests/fixtures/collectors/multisync_workers_sweep.py).

Hypothesis runs few examples (``max_examples`` small, no deadline): each is a real run.
"""

from __future__ import annotations

import json
import math

from conftest import FIXTURES, run_python
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FEW = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


def _batch(shape, offset):
    import torch
    from tensordict import TensorDict

    n = math.prod(shape)
    return TensorDict({"x": torch.arange(offset, offset + n).reshape(shape), "next": {"r": torch.ones(*shape, 1)}}, list(shape))


@FEW
@given(num_envs=st.integers(1, 4), lengths=st.lists(st.integers(1, 6), min_size=1, max_size=4))
def test_default_dim_extend_stores_time_by_env_over_every_extend(num_envs, lengths):
    """Each [num_envs, T_k] batch lands transposed, after the ones before it: the storage is
    [sum T_k, num_envs], row t holding step t of every env, and len(rb) counts every frame."""
    import torch
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    rb = ReplayBuffer(storage=LazyTensorStorage(10_000, ndim=2))
    written, offset = [], 0
    for steps in lengths:
        batch = _batch((num_envs, steps), offset)
        offset += batch.numel()
        rb.extend(batch)
        written.append(batch)
        assert rb.dim_extend == 1 and tuple(rb.storage.shape) == (sum(b.shape[1] for b in written), num_envs)
        assert len(rb) == offset
        assert torch.equal(rb.storage[:]["x"], torch.cat([b["x"].transpose(0, 1) for b in written], 0))


@FEW
@given(steps=st.integers(1, 5), envs=st.lists(st.integers(1, 4), min_size=1, max_size=4))
def test_dim_extend_0_stores_env_by_time_over_every_extend(steps, envs):
    """dim_extend=0: each [num_envs_k, T] batch is appended as num_envs_k rows of T steps."""
    import torch
    from torchrl.data import LazyTensorStorage, ReplayBuffer

    rb = ReplayBuffer(storage=LazyTensorStorage(10_000, ndim=2), dim_extend=0)
    written, offset = [], 0
    for num_envs in envs:
        batch = _batch((num_envs, steps), offset)
        offset += batch.numel()
        rb.extend(batch)
        written.append(batch)
        assert tuple(rb.storage.shape) == (sum(b.shape[0] for b in written), steps) and len(rb) == offset
        assert torch.equal(rb.storage[:]["x"], torch.cat([b["x"] for b in written], 0))


# A worker layout: each worker's env batch size (0: unbatched PendulumEnv, n: SerialEnv(n)).
LAYOUTS = st.one_of(
    st.integers(2, 3).map(lambda n: [0] * n),                                      # unbatched workers
    st.tuples(st.integers(2, 3), st.integers(1, 3)).map(lambda nb: [nb[1]] * nb[0]),  # equal batched workers
    st.lists(st.integers(1, 3), min_size=2, max_size=3, unique=True),               # batched, sizes differ
    st.integers(1, 3).map(lambda b: [0, b]),                                        # batch dims differ
)


def _expected_shape(sizes, frames):
    per_worker = frames // len(sizes)
    if sizes[0] == 0:
        return [len(sizes), per_worker]
    return [len(sizes), sizes[0], math.ceil(per_worker / sizes[0])]


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(cases=st.lists(st.fixed_dictionaries({"sizes": LAYOUTS, "batches": st.integers(2, 3),
                                             "use_buffers": st.sampled_from([None, False])}), min_size=2, max_size=2))
def test_multisync_joins_worker_batches_the_same_way_at_every_batch(cases):
    """collectors.md#worker-processes, at every batch (cat_results at its default, a stack):
    workers of one batch size give a dense [workers, *B, T] at every batch; workers of
    different batch sizes give a LazyStackedTensorDict at the first batch, then with
    use_buffers at its default raise "stacking tensordicts requires them to have congruent
    batch sizes" at the second, and with use_buffers=False a lazy stack at every batch;
    workers of different batch dims raise "Lazy stacking ... congruent batch dimensions"."""
    for case in cases:
        case.update(frames=6 * len(case["sizes"]), cat=None)
    proc = run_python([str(FIXTURES / "collectors" / "multisync_workers_sweep.py"), json.dumps(cases)], timeout=900, warm=True)
    seen = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(seen) == len(cases), (proc.stdout[-2000:], proc.stderr[-3000:])
    for row in seen:
        sizes, batches = row["case"]["sizes"], row.get("batches", [])
        if 0 in sizes and set(sizes) != {0}:
            assert batches == [] and "Lazy stacking of tensordicts requires them to have congruent batch dimensions" in row["error"], row
        elif len(set(sizes)) == 1:
            assert "error" not in row and len(batches) == row["case"]["batches"], row
            want = _expected_shape(sizes, row["case"]["frames"])
            assert all(b["type"] == "TensorDict" and b["batch_size"] == want for b in batches), row
        else:
            assert all(b["type"] == "LazyStackedTensorDict" and [p[0] for p in b["parts"]] == sizes for b in batches), row
            if row["case"]["use_buffers"] is None:  # the default: the first batch only
                assert len(batches) == 1 and "stacking tensordicts requires them to have congruent batch sizes" in row["error"], row
            else:
                assert "error" not in row and len(batches) == row["case"]["batches"], row
