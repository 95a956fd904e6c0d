"""Registered later."""


def register(sub) -> None:
    return None
