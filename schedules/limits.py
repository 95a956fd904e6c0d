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


# ---- sizes of a model and a run, wherever they are read ---------------------------------
# One table for the command line (``pipetab.cli``), ``config.json`` files (``hardware.hf``),
# profiles and traces (``hardware.profile``, ``hardware.trace``) and layouts
# (``hardware.layout``): each value is checked where it is read, before any work, and a
# refusal names the file or option and the key. The largest published models sit far below
# each (Llama 3 405B: 126 layers, hidden 16,384; DeepSeek-V3: 256 experts, vocabulary
# 129,280): the limits only keep arithmetic and loops over layers and divisors finite.
SIZE_LIMITS: dict[str, int] = {
    "layers": 2**14,  # transformer layers of a model (MTP modules included)
    "hidden": 2**20,  # hidden size, MLP widths, LoRA ranks
    "heads": 2**14,  # attention heads, key/value heads
    "head_dim": 2**14,  # one head's width
    "vocab": 2**26,  # vocabulary
    "experts": 2**16,  # routed and shared experts, experts per token
    "tp": 1024,  # tensor-parallel degree (and expert tensor-parallel)
    "gpus": 2**20,  # GPUs of one run (stages x tp x cp x dp)
    "microbatch_size": 2**20,  # sequences
    "global_batch": 2**24,  # sequences
    "seq_len": 2**24,  # tokens per sequence
    "layout_stages": 2**16,  # stages a layout string may name (virtual stages included)
}


def check_at_most(what: str, value: int, limit_key: str, where: str = "") -> int:
    """``value`` unless it is above ``SIZE_LIMITS[limit_key]``: ``ValueError`` naming
    ``where`` (a file, when read from one) and ``what`` otherwise."""
    limit = SIZE_LIMITS[limit_key]
    if value > limit:
        prefix = f"{where}: " if where else ""
        shown = f"{value:,}" if value.bit_length() < 128 else f"a number of {value.bit_length()} bits"
        raise ValueError(f"{prefix}{what} must be at most {limit:,}, got {shown} (see docs/limits.md)")
    return value
