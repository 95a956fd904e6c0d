"""Generators of known schedules: pure functions ``(stages, microbatches, **options) -> Schedule``."""


def check_shape(stages: object, microbatches: object, min_stages: int = 2) -> tuple[int, int]:
    """The checks every generator shares: ``stages`` an integer >= ``min_stages`` (2, or 1
    for the schedules that run without a pipeline), ``microbatches`` an integer >= 1
    (``ValueError`` naming the argument otherwise). Returns both, known to be integers."""
    if not isinstance(stages, int) or isinstance(stages, bool) or stages < min_stages:
        raise ValueError(f"stages must be an integer >= {min_stages}, got {stages!r}")
    if not isinstance(microbatches, int) or isinstance(microbatches, bool) or microbatches < 1:
        raise ValueError(f"microbatches must be an integer >= 1, got {microbatches!r}")
    return stages, microbatches
