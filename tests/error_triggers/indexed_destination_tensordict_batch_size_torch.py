"""A multi-process collector over a batched env (SerialEnv(2)) writing into a replay
buffer whose storage has the default ndim=1: the worker's error, then the parent's."""

SUBPROCESS = True


def trigger():
    from _collector_script import run

    return run("def make_env():\n    return SerialEnv(2, TinyEnv)\n",
               buffer="ReplayBuffer(storage=LazyTensorStorage(100, ndim=1))")
