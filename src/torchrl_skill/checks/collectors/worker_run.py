"""The worker processes of smoke_collector.py --workers N: one MultiSyncCollector, its weight
sync scheme, and a context manager that stops them all, also after Ctrl-C.
"""

from __future__ import annotations

import contextlib
import signal
import threading

FRAMES_PER_WORKER = 20  # a [2, 10] batch from each worker's SerialEnv(2)


@contextlib.contextmanager
def interrupts_deferred():
    """Hold a Ctrl-C that arrives while workers are being stopped; raise it once they are."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            raise KeyboardInterrupt


class WorkerRun:
    """One MultiSyncCollector, its weight sync scheme and the worker processes it started; a
    context manager whose exit stops them all, also when Ctrl-C or a crashed worker
    interrupted the collector's construction (its ``__init__`` never returned, so there is
    no collector to call ``shutdown()`` on).

    The scheme is built here (``SharedMemWeightSyncScheme``, the default MultiSyncCollector
    builds for an ``nn.Module`` policy, torchrl/collectors/_multi_base.py 0.14.1) so that
    :meth:`stop` can shut it down: left to its ``__del__`` during interpreter exit it starts
    a queue thread and the process hangs there forever (torchrl 0.14.1,
    torchrl/weight_update/_shared.py ``shutdown``).
    """

    def __init__(self):
        self.collector = None
        self.scheme = None
        self.policy = None
        self.rb = None
        self.iterator = None
        self.procs: list = []
        self.before: set = set()
        self.frames = 0

    def __enter__(self) -> "WorkerRun":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop(timeout=2.0 if exc_type is KeyboardInterrupt else 10.0)

    def started_here(self) -> list:
        """Live multiprocessing children started since :meth:`start` began."""
        import multiprocessing

        return [p for p in multiprocessing.active_children() if p not in self.before]

    def start(self, workers: int) -> None:
        """Spawn ``workers`` processes, each a SerialEnv(2), writing into one ndim=2 buffer."""
        import multiprocessing

        import torch
        from torchrl_skill.checks.collectors.collector_nets import make_batched_env, make_policy
        from torchrl.collectors import MultiSyncCollector
        from torchrl.data import LazyTensorStorage, ReplayBuffer
        from torchrl.weight_update import SharedMemWeightSyncScheme

        torch.manual_seed(0)
        self.before = set(multiprocessing.active_children())
        self.frames = FRAMES_PER_WORKER * workers
        self.policy = make_policy()
        self.rb = ReplayBuffer(storage=LazyTensorStorage(10 * self.frames, ndim=2))
        self.scheme = SharedMemWeightSyncScheme()
        self.collector = MultiSyncCollector(
            [make_batched_env] * workers, self.policy, frames_per_batch=self.frames, total_frames=-1,
            replay_buffer=self.rb, auto_register_policy_transforms=False,
            weight_sync_schemes={"policy": self.scheme},
        )
        self.procs = list(self.collector.procs)
        self.iterator = iter(self.collector)

    def stop(self, timeout: float = 10.0) -> None:
        """``shutdown(timeout)``, terminate (then kill) any worker still alive, shut the
        weight sync scheme down. Idempotent."""
        with interrupts_deferred():
            if self.collector is not None:
                self.collector.shutdown(timeout=timeout, raise_on_error=False)
            left = self.started_here()
            for proc in left:
                proc.terminate()
            for proc in left:
                proc.join(2.0)
                if proc.is_alive():
                    proc.kill()
                    proc.join(2.0)
            if self.scheme is not None:
                self.scheme.shutdown()
