"""Chimera and the asymmetric Chimera-style placement (being written)."""
CHIMERA_REGIME = "S even, B a multiple of S"


def chimera(stages, microbatches):
    raise NotImplementedError


def chimera_asym(stages, microbatches, split=(1, 2)):
    raise NotImplementedError
