"""The envs-and-transforms sub-skill's check scripts (entry points: sub-skills/envs-and-transforms/scripts/) and their helpers."""
