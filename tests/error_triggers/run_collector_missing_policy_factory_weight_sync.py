"""The call a torchrl 0.14.0 ``DistributedCollector(launcher="submitit_delayed")`` worker made
(pytorch/rl#4446): ``_run_collector`` with the payload keys it forwarded, which lacked
``policy_factory`` and ``weight_sync_schemes``. Replayed against the live 0.14.1 runner, whose
signature still requires both, so Python raises the same TypeError before any work starts."""


def trigger():
    from torchrl.collectors import Collector
    from torchrl.collectors.distributed.generic import _run_collector

    _run_collector(_store=None, sync=True, collector_class=Collector, num_workers=1, env_make=None,
                   policy=None, frames_per_batch=8, collector_kwargs={}, verbose=False)
