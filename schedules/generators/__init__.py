"""Generators of known schedules: pure functions ``(stages, microbatches, **options) -> Schedule``."""
