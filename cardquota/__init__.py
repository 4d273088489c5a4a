"""cardquota: card-level GPU quotas for Volcano, made safe (admission) and visible (accounting)."""

__version__ = "0.1.0"
