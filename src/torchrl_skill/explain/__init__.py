"""explain's private package (scripts/explain.py is its command).

- ``names``: finding a TorchRL/TensorDict name (the public index, read without importing
  the modules) and importing only the module that holds it;
- ``facts``: what any live object shows (kind, signature, first doc paragraph, parameter
  groups, optional backends); ``kinds``: facts measured per kind (transform, collector,
  storage, buffer, env, value estimator, module); ``loss``: a loss module's facts;
- ``notes``: the bundle's own notes on a name (rename rows, error-index entries; on an
  older release, its name in the newest line and the upstream fixes it lacks);
- ``errors``: answers derived from the live library for ``--error`` (a missing attribute,
  a bad keyword; on an older release, the upstream fixes that changed the message).

Nothing here imports torch at module level: ``explain.py --help`` and ``--error`` on a
message that names no torchrl object stay cheap.
"""
