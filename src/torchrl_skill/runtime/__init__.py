"""Running user code and processes: user targets (``user_code``), what spawned workers could not
import (``worker_imports``), what a check left running (``processes``), a private loopback
Ray (``ray_local``), a forked process turned into ``python ARGS`` (``fork``), the boot line
of child interpreters (``boot``), torch's thread count pinned for a block (``threads``) and the
one import hook (``import_hook``: the auditor's child and workers instrument torchrl with it).
"""
