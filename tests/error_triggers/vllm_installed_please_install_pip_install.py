"""vLLMWrapper built where vLLM is not installed (the verified stack has none)."""


def trigger():
    from torchrl.modules.llm import vLLMWrapper

    vLLMWrapper("facebook/opt-125m")
