"""The parts benchmarks/gpu_engines.py runs, one per process: ``python _gpu_parts.py PART OUT.json``.

NOT VERIFIED ON GPU (written on a CPU-only machine). Each part writes one JSON object to
OUT: ``ok``, what it measured, and ``error`` (the first line of what raised) when a step
failed. The model is a 2-layer Qwen2 from a config (head_dim 64), saved beside the
bundle's character-level tokenizer: nothing is downloaded. API names as in torchrl 0.14.1
(torchrl/weight_update/llm/vllm_nccl.py, sglang_nccl.py; torchrl/modules/llm).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

BUNDLE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BUNDLE / "src"))  # the bundle's package
PROMPTS = ["What is 2+2?", "Say hi."]


def part_collector(out: dict) -> None:
    """torchrl's Collector: PendulumEnv and a linear policy on cuda, 4 batches of 64 frames."""
    import torch
    from tensordict.nn import TensorDictModule
    from torchrl.collectors import Collector
    from torchrl.envs import PendulumEnv

    class Policy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 1)

        def forward(self, th, thdot):
            return self.lin(torch.stack([th, thdot], -1)).tanh() * 2

    policy = TensorDictModule(Policy(), in_keys=["th", "thdot"], out_keys=["action"]).to("cuda")
    collector = Collector(lambda: PendulumEnv(device="cuda"), policy, frames_per_batch=64, total_frames=256,
                          device="cuda")
    start, devices, frames = time.monotonic(), set(), 0
    try:
        for batch in collector:
            frames += batch.numel()
            devices.add(str(batch["action"].device))
    finally:
        collector.shutdown()
    out.update(ok=frames == 256 and devices == {"cuda:0"}, frames=frames, devices=sorted(devices),
               fps=round(frames / (time.monotonic() - start), 1))


def _model_dir(seed: int, scratch: Path):
    from torchrl_skill.checks.llm import tiny_llm as tiny
    from torchrl_skill.checks.llm import vllm_engine as ve

    tok = tiny.make_tokenizer()
    model = ve.make_model(tok, seed)
    return tok, model, ve.save_tiny_model(scratch / f"model{seed}", tok, model)


def _forward_logprobs(model, full):
    import torch

    with torch.no_grad():
        logits = model(full[None].to(model.device)).logits[0, :-1].float()
    return logits.log_softmax(-1).gather(-1, full[1:, None].to(model.device)).squeeze(-1).cpu()


def _score(wrapper_cls, engine, tok, full, **kw):
    """The engine's log-probs of ``full`` (generate=False, tokens mode): [len - 1]."""
    import torch
    from tensordict import TensorDict
    from torchrl.modules.llm.policies import Tokens

    td = TensorDict(tokens=Tokens(full=torch.nested.as_nested_tensor([full], layout=torch.jagged)), batch_size=(1,))
    policy = wrapper_cls(engine, tokenizer=tok, input_mode="tokens", generate=False, return_log_probs=True, **kw)
    return policy(td).get(("log_probs", "full"), as_list=True)[0][1:].float().cpu()


def _generate(wrapper_cls, engine, tok, **kw):
    from tensordict import TensorDict
    from torchrl.modules.llm.policies import Text

    policy = wrapper_cls(engine, tokenizer=tok, input_mode="text", generate=True, return_log_probs=True, **kw)
    td = policy(TensorDict(text=Text(prompt=PROMPTS), batch_size=(len(PROMPTS),)))
    return [r.numel() for r in td.get(("tokens", "response"), as_list=True)]


def _weight_update_check(out, score, new, full, update) -> None:
    """``score()`` before and after ``update()`` against the new model's forward: max |diff|."""
    ref = _forward_logprobs(new, full)
    out["before_max_abs"] = float((score() - ref).abs().max())
    start = time.monotonic()
    update()
    out["update_seconds"] = round(time.monotonic() - start, 2)
    out["after_max_abs"] = float((score() - ref).abs().max())
    out["ok"] = out["before_max_abs"] > 0.05 and out["after_max_abs"] < 0.05  # bf16/fp16 kernels on GPU: looser


def part_vllm(out: dict) -> None:
    """vLLM's CUDA build through torchrl: AsyncVLLM (Ray), vLLMWrapper, VLLMWeightSyncScheme (NCCL)."""
    import ray
    import torch
    from torchrl.modules.llm import vLLMWrapper
    from torchrl.modules.llm.backends import make_async_vllm_engine
    from torchrl.weight_update.llm import VLLMWeightSyncScheme, get_model_metadata

    scratch = Path(tempfile.mkdtemp(prefix="gpu_vllm_"))
    tok, _, model_dir = _model_dir(0, scratch)
    _, new, _ = _model_dir(1, scratch)
    new = new.to("cuda")
    ray.init(num_gpus=1, include_dashboard=False, _temp_dir=str(scratch / "ray"))
    try:
        start = time.monotonic()
        engine = make_async_vllm_engine(model_name=str(model_dir), num_devices=1, compile=False, dtype="float32",
                                        gpu_memory_utilization=0.3, max_model_len=256)
        out["engine_start_seconds"] = round(time.monotonic() - start, 1)
        gk = {"generate_kwargs": {"max_tokens": 6}}
        out["generated"] = _generate(vLLMWrapper, engine, tok, **gk)
        full = torch.tensor(tok(tok.apply_chat_template([{"role": "user", "content": "Name a color."}],
                                                         tokenize=False))["input_ids"])
        scheme = VLLMWeightSyncScheme(num_replicas=1, gpus_per_replica=1, strategy="state_dict")
        sender = scheme.create_sender()
        sender.register_model(new)

        def update():
            sender.init_all_workers_group(get_model_metadata(new), vllm_engine=engine)
            sender.update_weights()

        _weight_update_check(out, lambda: _score(vLLMWrapper, engine, tok, full), new, full, update)
    finally:
        ray.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def part_sglang(out: dict) -> None:
    """An SGLang server, SGLangWrapper, SGLangWeightSyncScheme (NCCL)."""
    import requests
    import torch
    from torchrl.modules.llm import SGLangWrapper
    from torchrl.weight_update.llm import SGLangWeightSyncScheme, get_sglang_model_metadata

    scratch = Path(tempfile.mkdtemp(prefix="gpu_sglang_"))
    tok, _, model_dir = _model_dir(0, scratch)
    _, new, _ = _model_dir(1, scratch)
    new = new.to("cuda")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", "--model-path", str(model_dir),
                               "--port", str(port), "--host", "127.0.0.1", "--mem-fraction-static", "0.3",
                               "--disable-cuda-graph", "--dtype", "float32"],
                              stdout=subprocess.DEVNULL, stderr=open(scratch / "server.log", "w"))
    try:
        start = time.monotonic()
        while time.monotonic() - start < 240:
            try:
                if requests.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if server.poll() is not None:
                raise RuntimeError(f"sglang server exited {server.returncode}: "
                                   f"{(scratch / 'server.log').read_text()[-300:]}")
            time.sleep(2)
        out["server_start_seconds"] = round(time.monotonic() - start, 1)
        out["generated"] = _generate(SGLangWrapper, url, tok, generate_kwargs={"max_new_tokens": 6})
        full = torch.tensor(tok(tok.apply_chat_template([{"role": "user", "content": "Name a color."}],
                                                         tokenize=False))["input_ids"])
        scheme = SGLangWeightSyncScheme(server_url=url, num_gpus=1, strategy="state_dict")
        sender = scheme.create_sender()
        sender.register_model(new)

        def update():
            sender.init_all_workers_group(get_sglang_model_metadata(new))
            sender.update_weights()

        _weight_update_check(out, lambda: _score(SGLangWrapper, url, tok, full), new, full, update)
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


PARTS = {"collector": part_collector, "vllm": part_vllm, "sglang": part_sglang}

if __name__ == "__main__":
    name, dest = sys.argv[1], Path(sys.argv[2])
    result: dict = {"ok": False}
    try:
        PARTS[name](result)
    except BaseException as err:  # the driver reads the JSON; the traceback goes to this part's log
        traceback.print_exc()
        result["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:400]
    dest.write_text(json.dumps(result))
