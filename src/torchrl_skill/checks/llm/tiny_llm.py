"""Tiny, offline, in-memory tokenizer and models for CPU tests of TorchRL's LLM stack.

Nothing is downloaded: the tokenizer is a character-level model built with the
``tokenizers`` package (one printable-ASCII character per token) and wrapped as a
``transformers.PreTrainedTokenizerFast`` carrying a ChatML chat template; the models are
a Qwen2 causal LM and a Qwen2 sequence-classification reward model built from a config
with random weights. Qwen2 (not GPT-2) because, on transformers 5.x, GPT-2's forward
receives the attention mask as its cache argument when torchrl's ``TransformersWrapper``
recomputes log-probs (``generate=False``) and fails with ``AttributeError: 'Tensor'
object has no attribute 'get_seq_length'``; Qwen2 and Llama configs do not.

Stable API (imported by other scripts and tests of this sub-skill):
``make_tokenizer()``, ``make_causal_lm(tokenizer, seed=0)``,
``make_reward_model(tokenizer, seed=0)``. Verified with tokenizers 0.23.3,
transformers 5.24.0, torchrl 0.14.1.
"""

from __future__ import annotations

# ChatML special tokens. The template below is torchrl's "chatml_format" template
# (torchrl/data/llm/history.py, _CHAT_TEMPLATES), which History.apply_chat_template
# also picks for a tokenizer whose name matches no known family; it marks assistant
# turns with {% generation %} so return_assistant_tokens_mask works.
PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
UNK_TOKEN = "<unk>"
SPECIAL_TOKENS = [PAD_TOKEN, IM_START, IM_END]

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}{% generation %}{{ message['content'] }}"
    "{% endgeneration %}{{ '<|im_end|>\\n' }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)

# Model sizes: small enough for a CPU forward+backward in milliseconds.
HIDDEN = 32
LAYERS = 2
HEADS = 4
KV_HEADS = 2
INTERMEDIATE = 64
MAX_POSITIONS = 512


def make_tokenizer():
    """Build a character-level tokenizer in memory, as ``transformers.PreTrainedTokenizerFast``.

    Vocabulary (``len(tokenizer) == 100``): ``<unk>`` (id 0), ``"\\n"`` (1), the 95
    printable ASCII characters (ids 2..96), then the special tokens ``<|endoftext|>``
    (pad, 97), ``<|im_start|>`` (98) and ``<|im_end|>`` (eos, 99). One character is one token (a ``tokenizers.models.BPE`` with no
    merges and a ``Fuse`` decoder), so any printable-ASCII text, and any token sequence
    the model generates, decodes and re-encodes to the same ids: log-probs recomputed
    from text match the generation ones. Other characters map to ``<unk>``.
    ``chat_template`` is ChatML with ``{% generation %}`` markers; ``padding_side`` is
    ``"left"`` (decoder-only generation). ``name_or_path`` is empty, so torchrl's
    ``History.apply_chat_template`` falls back to its ``chatml_format`` template, which
    renders the same text.

    Returns:
        transformers.PreTrainedTokenizerFast
    """
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    chars = [UNK_TOKEN, "\n"] + [chr(c) for c in range(32, 127)]
    vocab = {ch: i for i, ch in enumerate(chars)}
    for tok in SPECIAL_TOKENS:
        vocab[tok] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK_TOKEN))
    backend.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token=UNK_TOKEN,
        pad_token=PAD_TOKEN,
        eos_token=IM_END,
        additional_special_tokens=[IM_START],
        padding_side="left",
        model_max_length=MAX_POSITIONS,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def _qwen2_config(tokenizer, **extra):
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        intermediate_size=INTERMEDIATE,
        max_position_embeddings=MAX_POSITIONS,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
        **extra,
    )


def make_causal_lm(tokenizer, seed: int = 0):
    """Build a tiny random ``transformers.Qwen2ForCausalLM`` (float32, CPU, eval mode).

    2 layers, hidden size 32, 4 heads (2 KV heads), vocabulary ``len(tokenizer)``;
    ``generation_config`` pad/eos ids follow the tokenizer. Weights come from
    ``torch.manual_seed(seed)``: the same seed gives the same model. About 27k parameters.

    Args:
        tokenizer: the tokenizer from :func:`make_tokenizer` (any tokenizer with pad and
            eos ids works).
        seed: torch seed for weight initialisation.

    Returns:
        transformers.Qwen2ForCausalLM
    """
    import torch
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(_qwen2_config(tokenizer))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model.eval()


def make_reward_model(tokenizer, seed: int = 0):
    """Build a tiny random ``transformers.Qwen2ForSequenceClassification`` reward model.

    One output label (``num_labels=1``): ``model(input_ids, attention_mask).logits`` has
    shape ``[batch, 1]``, the score read at the last non-pad token (``pad_token_id`` set
    from the tokenizer, so left- and right-padded batches both work). Same size as
    :func:`make_causal_lm`; weights from ``torch.manual_seed(seed)``; eval mode.

    Args:
        tokenizer: the tokenizer from :func:`make_tokenizer`.
        seed: torch seed for weight initialisation.

    Returns:
        transformers.Qwen2ForSequenceClassification
    """
    import torch
    from transformers import Qwen2ForSequenceClassification

    torch.manual_seed(seed)
    model = Qwen2ForSequenceClassification(_qwen2_config(tokenizer, num_labels=1))
    return model.eval()
