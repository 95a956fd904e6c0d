"""Sizes pipetab handles, checked before any work starts (see ``docs/limits.md``).

A request beyond a limit is refused with one ``ValueError`` sentence naming the parameter,
the size it asks for and the limit, in milliseconds, before anything is generated.

* ``MAX_DEVICES`` pipeline devices (S): per-device structures and per-round work grow with it.
* ``MAX_OPS`` ops in one schedule (B microbatches x stages per microbatch x 2 or 3 kinds);
  ``BYTES_PER_OP`` is the measured peak memory per op of generating, laying out,
  validating, measuring and simulating a schedule, so ``MAX_OPS`` ops need about
  ``estimated_bytes(MAX_OPS)``.
* ``MAX_GRID_CELLS`` cells (devices x columns) of a table drawn as a grid (text form,
  torch CSV, ``Table.grid``).
* ``MAX_DRAWN_OPS`` ops in a picture (``pipetab.plot``): above a few hundred ops per
  device the picture draws per-bin shares of each kind, but collecting the ops still costs
  about 30 us each (131,072 ops: about 4 s).
"""

from __future__ import annotations

MAX_DEVICES = 1024
MAX_OPS = 2**23  # 8,388,608
BYTES_PER_OP = 240
MAX_GRID_CELLS = 2**22  # 4,194,304
MAX_DRAWN_OPS = 2**18  # 262,144


def estimated_bytes(num_ops: int) -> int:
    """Peak memory, in bytes, of generating and judging a schedule of ``num_ops`` ops."""
    return num_ops * BYTES_PER_OP


def check_size(num_devices: int, num_ops: int, what: str = "the schedule") -> None:
    """``ValueError`` unless ``num_devices`` and ``num_ops`` are within the limits."""
    if num_devices > MAX_DEVICES:
        raise ValueError(
            f"stages must be at most {MAX_DEVICES} devices, got {num_devices} (see docs/limits.md)"
        )
    if num_ops > MAX_OPS:
        raise ValueError(
            f"{what} would have {num_ops:,} ops (about {estimated_bytes(num_ops) / 2**30:.3g} GiB); "
            f"pipetab handles at most {MAX_OPS:,} (see docs/limits.md)"
        )


def check_grid(num_devices: int, columns: int) -> None:
    """``ValueError`` unless a grid of ``num_devices`` rows and ``columns`` columns is
    within ``MAX_GRID_CELLS``."""
    cells = num_devices * columns
    if cells > MAX_GRID_CELLS:
        raise ValueError(
            f"the table is {num_devices} devices x {columns:,} columns = {cells:,} cells, too many "
            f"to draw as a grid (at most {MAX_GRID_CELLS:,}); use the CSV or JSON form "
            "(see docs/limits.md)"
        )


def check_grid_ops(num_ops: int) -> None:
    """``ValueError`` when a grid of ``num_ops`` ops is beyond ``MAX_GRID_CELLS`` whatever
    its layout (every op takes at least one cell): checkable before generating."""
    if num_ops > MAX_GRID_CELLS:
        raise ValueError(
            f"a grid of {num_ops:,} ops has at least as many cells, more than the {MAX_GRID_CELLS:,} "
            "that can be drawn; use the CSV or JSON form (see docs/limits.md)"
        )


def check_drawable(num_ops: int) -> None:
    """``ValueError`` unless a picture of ``num_ops`` ops is within ``MAX_DRAWN_OPS``."""
    if num_ops > MAX_DRAWN_OPS:
        raise ValueError(
            f"a picture of {num_ops:,} ops is too many to draw (at most {MAX_DRAWN_OPS:,}); "
            "draw fewer stages or microbatches (see docs/limits.md)"
        )
