"""The ``pipetab`` command line. Every error is one line on stderr and exit code 2."""

from .main import main

__all__ = ["main"]
