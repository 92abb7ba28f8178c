"""The stack probe: which torch/tensordict/torchrl run here, whether that stack is supported
and verified (``probe``), what differs on other release lines (``versions``), and the
``check_torchrl_env.py`` script body.
"""
