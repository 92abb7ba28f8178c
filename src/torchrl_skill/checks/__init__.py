"""The check scripts' bodies, one sub-package per sub-skill (``envs``: envs-and-transforms,
``collectors``: collectors-and-replay, ``modules``: modules-and-policies, ``objectives``:
objectives-and-training, ``llm``: llm-vla-and-services, ``development``:
development-and-testing), their private helpers beside them, and ``run_all_checks``.
"""
