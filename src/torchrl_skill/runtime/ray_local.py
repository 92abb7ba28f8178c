"""A private local Ray that leaves nothing behind and stays on the loopback interface, for
every script that starts Ray (check_ray_scaling.py directly, smoke_services.py through
``torchrl.services.get_services(ray_init_config=...)``).

What ray 2.60.0 does by default, observed with strace on this machine (offline): the driver
connects a UDP socket to 8.8.8.8 to pick the node address and binds the GCS and raylet to
that address; the dashboard process (started even with ``include_dashboard=False``, then
only to run its usage-stats module) sends HTTP requests to the cloud metadata address
169.254.169.254; usage stats are reported a minute after start unless disabled; the
session folder stays in ``/tmp/ray``. The environment below, set while ``ray.init`` starts
the processes (they inherit it), turns each of these off; with it strace shows no
connection outside 127.0.0.1:

- ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``: Ray uses the loopback address for the node
  (``ray._private.services.get_node_ip_address``); read when ray is first imported;
- ``RAY_USAGE_STATS_ENABLED=0``: no usage report;
- ``http_proxy``/``https_proxy`` at a closed loopback port with ``no_proxy`` for loopback:
  the metadata probes (``requests`` with a 1 s timeout) fail at once, locally;
- ``_temp_dir``: a fresh temporary folder, removed by :meth:`LocalRay.stop`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Iterator

OFFLINE_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "no_proxy": "127.0.0.1,localhost,::1",
    "NO_PROXY": "127.0.0.1,localhost,::1",
}
LOOPBACK = ("127.0.0.1", "::1", "localhost")


@contextlib.contextmanager
def offline_env() -> Iterator[None]:
    """:data:`OFFLINE_ENV` and ``src/`` appended to PYTHONPATH set while Ray starts its
    processes (they inherit them), then the caller's values put back."""
    from .boot import SRC

    # Ray's workers (a collector actor unpickling the check's env factory by reference) must
    # import torchrl_skill: src/ holds only that package, so it goes last on their path.
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {**OFFLINE_ENV, "PYTHONPATH": os.pathsep.join(paths if SRC in paths else [*paths, SRC])}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def init_kwargs(temp_dir: Path | str, num_cpus: int = 1) -> dict:
    """``ray.init`` keywords for a fresh local instance in ``temp_dir``: ``address="local"``
    never joins a cluster found through RAY_ADDRESS or the temp folder; no dashboard; no
    worker logs echoed to the driver."""
    return {
        "address": "local",
        "num_cpus": num_cpus,
        "include_dashboard": False,
        "log_to_driver": False,
        "_node_ip_address": "127.0.0.1",
        "_temp_dir": str(temp_dir),
    }


def system_temp() -> str:
    """The folder Ray would use (``ray._common.utils.get_default_system_temp_dir``, ray 2.60):
    RAY_TMPDIR, else TMPDIR on Linux, else /tmp (short: Ray's socket paths must fit 107 bytes)."""
    if "RAY_TMPDIR" in os.environ:
        return os.environ["RAY_TMPDIR"]
    if sys.platform.startswith("linux") and "TMPDIR" in os.environ:
        return os.environ["TMPDIR"]
    return "/tmp" if sys.platform.startswith(("linux", "darwin")) else tempfile.gettempdir()


def default_ray_temp() -> Path:
    """Where Ray keeps its sessions when ``_temp_dir`` is not given (``<system temp>/ray``)."""
    return Path(system_temp()) / "ray"


def sessions(folder: Path) -> set[str]:
    """Names of the ``session_*`` folders under ``folder`` (empty when it does not exist)."""
    return {p.name for p in folder.glob("session_*")} if folder.is_dir() else set()


class LocalRay:
    """``ray.init(address="local", num_cpus=1, ...)`` in a temporary folder, offline.

    ``start()`` returns the node address; ``stop()`` (idempotent) shuts Ray down, removes
    the folder and puts back the environment variables ``ray.init`` set in this process
    (ray 2.60 sets ``PYTHONBREAKPOINT`` and ``RAY_AUTH_MODE``). ``imported_before``: ray was
    imported before ``start()``, so the loopback setting (read at import) could not apply.
    """

    def __init__(self):
        self.temp_dir: Path | None = None
        self.started = False
        self.imported_before = False
        self.default_sessions = sessions(default_ray_temp())  # retaken by start()
        self.environ: dict[str, str] | None = None

    def __enter__(self) -> "LocalRay":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> str:
        self.imported_before = "ray" in sys.modules
        self.default_sessions = sessions(default_ray_temp())
        self.environ = dict(os.environ)
        with offline_env():
            import ray

            if ray.is_initialized():
                raise RuntimeError("a Ray session is already initialized in this process")
            self.temp_dir = Path(tempfile.mkdtemp(prefix="trs-ray-", dir=system_temp()))
            ray.init(**init_kwargs(self.temp_dir), configure_logging=False)
            self.started = True
            return ray.nodes()[0]["NodeManagerAddress"]

    def stop(self) -> None:
        if self.started:
            import ray

            ray.shutdown()
            self.started = False
        if self.environ is not None:
            for key in set(os.environ) - set(self.environ):
                del os.environ[key]
            os.environ.update(self.environ)
            self.environ = None
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    def left_behind(self) -> list[str]:
        """Folders this session left: its temp folder, new sessions in Ray's default folder."""
        left = [str(self.temp_dir)] if self.temp_dir is not None and self.temp_dir.exists() else []
        new = sessions(default_ray_temp()) - self.default_sessions
        return left + [str(default_ray_temp() / name) for name in sorted(new)]
