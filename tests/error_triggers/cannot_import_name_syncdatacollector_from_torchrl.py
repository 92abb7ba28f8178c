"""Importing a collector name that torchrl 0.13 removed."""


def trigger():
    from torchrl.collectors import SyncDataCollector  # noqa: F401
