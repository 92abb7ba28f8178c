"""LLM facts for ``scripts/explain.py``: which wrapper mode writes each key an LLM loss
reads, measured by running the installed ``TransformersWrapper`` on a tiny Qwen2 model
(src/torchrl_skill/checks/llm/tiny_llm.py; nothing downloaded) in every mode.

One job, one entry point, :func:`llm_facts`, called from explain.py for every name; it
returns nothing for names that are neither an LLM loss (``GRPOLoss`` and subclasses,
``SFTLoss``) nor an LLM wrapper (``LLMWrapperBase`` subclasses). The modes: ``input_mode``
history/text/tokens x (``generate=True`` with and without ``return_log_probs``,
``generate=False``, where log-probs are forced on). Each mode runs once on one prompt with
2 new tokens; the keys are the leaves it wrote with a value (entries set to None do not
count). A wrapper that cannot be built here (``vLLMWrapper`` without vllm and a GPU
engine) is said so; its keywords are read from its live signature.
"""

from __future__ import annotations

import functools
import inspect

MODES = [(mode, gen, lp) for mode in ("history", "text", "tokens") for gen, lp in ((True, True), (True, False), (False, True))]


def _label(mode, gen, lp) -> str:
    return f"input_mode={mode!r} generate={gen}" + (f" return_log_probs={lp}" if gen else "")


def _fmt(key) -> str:
    return "(" + ", ".join(repr(k) for k in key) + ")" if isinstance(key, tuple) else repr(key)


@functools.lru_cache(maxsize=1)
def written_by_mode() -> dict:
    """``{(input_mode, generate, return_log_probs): (in_key, sorted written leaf keys)}``,
    measured on the installed TransformersWrapper (torchrl.modules.llm)."""
    import warnings

    import torch

    from torchrl_skill.checks.llm import tiny_llm as tiny
    from tensordict import TensorDict
    from torchrl.data.llm import History
    from torchrl.modules.llm import ChatHistory, TransformersWrapper

    tok = tiny.make_tokenizer()
    model = tiny.make_causal_lm(tok)
    chat = [{"role": "user", "content": "hi"}]
    seed = TensorDict(history=ChatHistory(prompt=History.from_chats([chat])), batch_size=(1,)).to_lazystack(0)
    gen_kwargs = {"max_new_tokens": 2, "do_sample": False}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        full = TransformersWrapper(model, tokenizer=tok, generate_kwargs=gen_kwargs)(seed.copy())
        out = {}
        for mode, gen, lp in MODES:
            kwargs = {"generate_kwargs": gen_kwargs, "return_log_probs": lp} if gen else {}
            wrapper = TransformersWrapper(model, tokenizer=tok, input_mode=mode, generate=gen, **kwargs)
            td = full.select(wrapper.input_key).copy()
            result = wrapper(td)
            # (group, entry) pairs: ("history", "full") is one History, ("text", "full") a list of str
            leaves = {k for k in result.keys(True) if isinstance(k, tuple) and len(k) == 2
                      and k[1] != "padded" and _has_value(result, k)}
            out[(mode, gen, lp)] = (wrapper.input_key, sorted(leaves - {wrapper.input_key}, key=str))
    return out


def _has_value(td, key) -> bool:
    try:
        value = td.get(key, None, as_list=True)
    except Exception:
        value = td.get(key, None)
    if isinstance(value, list):
        return any(v is not None for v in value)
    return value is not None


def _writers(key, table) -> list[str]:
    return [_label(*mode) for mode, (_, written) in table.items() if key in written]


def _loss_reads(cls) -> list[tuple[str, tuple]]:
    """``(field, default key)`` for each tensor key the loss reads: its ``_AcceptedKeys``
    fields, less those its docstring calls an output key (SFTLoss's ``log_probs``)."""
    import dataclasses
    import re

    keys = cls._AcceptedKeys()
    doc = " ".join((cls._AcceptedKeys.__doc__ or "").split())
    outputs = {m.group(1) for m in re.finditer(r"(\w+) \(NestedKey\): The output", doc)}
    return [(f.name, getattr(keys, f.name)) for f in dataclasses.fields(keys) if f.name not in outputs]


def loss_lines(cls, table) -> list[str]:
    """For each key ``cls`` reads (its class-default tensor_keys), the wrapper modes that write it."""
    lines = []
    for name, key in _loss_reads(cls):
        writers = _writers(key, table)
        if writers:
            where = "; ".join(writers) if len(writers) < len(table) else "every mode"
            lines.append(f"reads {_fmt(key)} (tensor_keys.{name}): written by TransformersWrapper {where}")
            continue
        near = [k for mode in table.values() for k in mode[1] if isinstance(k, tuple) and isinstance(key, tuple) and k[-1] == key[-1]
                and k[-2:] != key[-2:] and k[-2].endswith(key[-2].split("_")[-1])]
        hint = ""
        if isinstance(key, tuple) and key[0] == "next":
            hint = (f"; a generate=False wrapper with log_probs_key={key[-2]!r} writes {_fmt(key[1:])} at the root: "
                    f"move it under 'next' (batch.set('next', out.select({_fmt(key[1:])})))")
        elif near:
            hint = f"; the wrappers write {', '.join(sorted({_fmt(k) for k in near}))} instead"
        who = "MCAdvantage in the replay buffer, or your code" if name == "advantage" else "your code"
        lines.append(f"reads {_fmt(key)} (tensor_keys.{name}): written by no TransformersWrapper mode ({who}){hint}")
    gen_lp = [k for k in table[("history", True, True)][1] if k[0] == "log_probs"]
    lines.append(f"the generating wrapper's log-probs are {', '.join(map(_fmt, gen_lp))} only, and their first entry is "
                 "0.0 on torchrl 0.14.1: behaviour log-probs come from a generate=False pass under torch.no_grad() "
                 "(python $SKILL_DIR/sub-skills/llm-vla-and-services/scripts/check_llm_wiring.py checks the wiring)")
    return lines


def wrapper_lines(cls, table) -> list[str]:
    """The keys each mode reads and writes (TransformersWrapper measured; other wrappers said)."""
    from torchrl.modules.llm import TransformersWrapper

    if cls is not TransformersWrapper:
        params = inspect.signature(cls).parameters
        shared = [p for p in ("input_mode", "generate", "return_log_probs", "num_samples", "pad_output") if p in params]
        return [f"not run here: {cls.__name__} needs its serving engine (not installed or no GPU), so the keys of each mode "
                f"are not verified; it takes the same mode keywords ({', '.join(shared)}), and TransformersWrapper's measured "
                "table is: python $SKILL_DIR/scripts/explain.py TransformersWrapper"]
    lines = []
    for mode, (in_key, written) in table.items():
        lines.append(f"{_label(*mode)}: reads {_fmt(in_key)}, writes {', '.join(map(_fmt, written))}")
    return lines


def llm_facts(obj) -> list[str]:
    """Measured key facts for an LLM loss or wrapper class; [] for anything else."""
    if not isinstance(obj, type) or not obj.__module__.startswith(("torchrl.objectives.llm", "torchrl.modules.llm")):
        return []
    from torchrl.modules.llm.policies.common import LLMWrapperBase
    from torchrl.objectives import LossModule

    is_wrapper = issubclass(obj, LLMWrapperBase) and obj is not LLMWrapperBase
    is_loss = issubclass(obj, LossModule) and hasattr(obj, "_AcceptedKeys")
    if not (is_wrapper or is_loss):
        return []
    try:
        table = written_by_mode()
    except Exception as err:  # said, not crashed on: explain must still print the rest
        return [f"wrapper modes not measured: {type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}"]
    return wrapper_lines(obj, table) if is_wrapper else loss_lines(obj, table)
