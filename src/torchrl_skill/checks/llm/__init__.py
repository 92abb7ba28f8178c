"""The llm-vla-and-services sub-skill's check scripts (entry points: sub-skills/llm-vla-and-services/scripts/) and their helpers."""
