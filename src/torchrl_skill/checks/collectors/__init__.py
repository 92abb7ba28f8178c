"""The collectors-and-replay sub-skill's check scripts (entry points: sub-skills/collectors-and-replay/scripts/) and their helpers."""
