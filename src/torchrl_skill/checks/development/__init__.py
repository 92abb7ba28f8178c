"""The development-and-testing sub-skill's check scripts (entry points: sub-skills/development-and-testing/scripts/) and their helpers."""
