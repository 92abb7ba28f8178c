"""A GPT-2 model (transformers 5.x) in a generate=False TransformersWrapper."""


def trigger():
    import torch
    from _llm import tokenizer
    from tensordict import TensorDict
    from torchrl.modules.llm import Text, TransformersWrapper
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = tokenizer()
    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2, n_positions=64,
                                      bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id)).eval()
    wrapper = TransformersWrapper(gpt2, tokenizer=tok, input_mode="text", generate=False, return_log_probs=True)
    wrapper(TensorDict({"text": Text(full=["hello", "hi"])}, batch_size=(2,)))
