"""The modules-and-policies sub-skill's check scripts (entry points: sub-skills/modules-and-policies/scripts/) and their helpers."""
