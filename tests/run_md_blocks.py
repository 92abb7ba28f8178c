"""Run markdown python blocks (a JSON list, from --blocks FILE or stdin) and print one JSON list of results.

Each block runs alone as a temporary script with ``__name__ == "__main__"`` (so spawn
workers can re-import it), in a temporary working directory, with a per-block alarm,
no GPU and no network beyond loopback. A block with ``raises`` must raise an exception
whose ``"Type: message"`` contains that text. Exit 0 when every block kept its promise,
1 otherwise. Used by tests/doccheck.py.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import runpy
import signal
import socket
import sys
import tempfile
import time
import traceback
from pathlib import Path

os.environ.setdefault("TORCHRL_CONSOLE_STREAM", "stderr")
os.environ["CUDA_VISIBLE_DEVICES"] = ""
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

_real_connect = socket.socket.connect


def _loopback_only(self, address):
    host = address[0] if isinstance(address, tuple) else address
    if isinstance(host, str) and host not in ("127.0.0.1", "localhost", "::1") and not host.startswith("127.") and self.family in (socket.AF_INET, socket.AF_INET6):
        raise OSError(f"network blocked in docs blocks: {address}")
    return _real_connect(self, address)


socket.socket.connect = _loopback_only


class BlockTimeout(BaseException):
    pass


def _alarm(signum, frame):
    raise BlockTimeout()


def run_block(block: dict, timeout: int, workdir: Path, index: int) -> str | None:
    path = workdir / f"block_{index}_line{block['line']}.py"
    path.write_text(block["code"])
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    start = time.perf_counter()
    err: BaseException | None = None
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink):
            runpy.run_path(str(path), run_name="__main__")
    except BlockTimeout:
        return f"block did not finish in {timeout} s"
    except SystemExit as exc:
        if exc.code not in (None, 0):
            err = exc
    except BaseException as exc:  # the block's own failure is what we report
        err = exc
    finally:
        signal.alarm(0)
    elapsed = time.perf_counter() - start
    expected = block.get("raises")
    if expected:
        if err is None:
            return f"expected an exception containing {expected!r}, block ran without one"
        got = f"{type(err).__name__}: {err}"
        if expected not in got:
            return f"expected exception text {expected!r}, got {got[:300]!r}"
        return None
    if err is not None:
        tb = traceback.format_exception(type(err), err, err.__traceback__)
        return f"block raised {type(err).__name__}: {str(err)[:300]} | {''.join(tb[-3:])[-600:]}"
    if elapsed > timeout:
        return f"block took {elapsed:.1f} s (max {timeout})"
    return None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--timeout", type=int, default=180, help="seconds before a block counts as hung")
    parser.add_argument("--blocks", type=Path, default=None, help="JSON file of blocks (default: stdin)")
    args = parser.parse_args()
    blocks = json.loads(args.blocks.read_text()) if args.blocks else json.load(sys.stdin)
    results = []
    with tempfile.TemporaryDirectory(prefix="torchrl-skill-md-") as tmp:
        for i, block in enumerate(blocks):
            workdir = Path(tmp) / f"b{i}"
            workdir.mkdir()
            os.chdir(workdir)
            results.append({"line": block["line"], "problem": run_block(block, args.timeout, workdir, i)})
            os.chdir(tmp)
    sys.stdout.write(json.dumps(results) + "\n")
    return 1 if any(r["problem"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
