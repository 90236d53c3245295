"""A user's mixer package for recall-lab: retention (linear attention with a fixed decay per
head), written against the mixer contract only, with no import from recall_lab."""

from retention_mixer.retention import LeakyRetention, Retention

__all__ = ["LeakyRetention", "Retention"]
