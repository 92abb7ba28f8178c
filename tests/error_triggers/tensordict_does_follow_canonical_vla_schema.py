"""validate_vla_tensordict on a batch without language_instruction."""


def trigger():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from torchrl_skill.checks.llm import check_vla_schema
    from torchrl.data.vla import validate_vla_tensordict

    batch = check_vla_schema.make_vla_batch()
    del batch["language_instruction"]
    validate_vla_tensordict(batch)
