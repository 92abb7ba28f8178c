"""The objectives-and-training sub-skill's check scripts (entry points: sub-skills/objectives-and-training/scripts/) and their helpers."""
