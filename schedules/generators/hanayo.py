"""Hanayo (being written)."""
HANAYO_REGIME = "TBD"


def hanayo(stages, microbatches, waves=1):
    raise NotImplementedError
