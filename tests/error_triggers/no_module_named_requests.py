"""ModuleNotFoundError: No module named 'requests', from torchrl.weight_update.llm (SGLang
weight sync) when requests is not installed (hidden here)."""

SUBPROCESS = "cold"  # hides what a warm interpreter imported already


def trigger():
    from _tiny import hide_modules

    hide_modules("requests", probe_sees_them=True)
    import torchrl.weight_update.llm  # noqa: F401
