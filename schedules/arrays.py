"""Ops as a structure of arrays: what schedules and tables hold underneath their ``Op`` face.

``OpArrays`` keeps one op per index in four read-only numpy arrays: ``kind`` (0 = F,
1 = B, 2 = W, ``KIND_CODES``), ``pipeline``, ``stage`` and ``microbatch``. Schedules keep
them in device order (device 0's order, then device 1's, ...) with ``offsets`` marking
where each device starts; tables keep them sorted by device and start. ``Op`` values are
made only when asked for (``op``, ``to_ops``), never on the hot path.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from operator import itemgetter
from typing import Iterable

import numpy as np

from .ops import Kind, Op

KINDS = (Kind.F, Kind.B, Kind.W)
KIND_CODES = {k: i for i, k in enumerate(KINDS)}
F_CODE, B_CODE, W_CODE = 0, 1, 2


def frozen(array, dtype) -> np.ndarray:
    """``array`` as a read-only numpy array of ``dtype`` (copied only when needed)."""
    out = np.asarray(array, dtype=dtype)
    if out.flags.writeable:
        if out.base is not None or out is array:
            out = out.copy()
        out.flags.writeable = False
    return out


@dataclass(frozen=True, eq=False)
class OpArrays:
    """Ops as four equally long read-only arrays (see module docstring)."""

    kind: np.ndarray
    pipeline: np.ndarray
    stage: np.ndarray
    microbatch: np.ndarray

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", frozen(self.kind, np.int8))
        for name in ("pipeline", "stage", "microbatch"):
            object.__setattr__(self, name, frozen(getattr(self, name), np.int64))
        n = len(self.kind)
        if any(len(getattr(self, f)) != n for f in ("pipeline", "stage", "microbatch")):
            raise ValueError("op arrays must all have the same length")

    def __len__(self) -> int:
        return len(self.kind)

    @classmethod
    def from_ops(cls, ops: Iterable[Op]) -> "OpArrays":
        """The arrays of a sequence of ``Op`` values."""
        ops = ops if isinstance(ops, (list, tuple)) else list(ops)
        if not ops:
            empty = np.zeros(0, np.int64)
            return cls(empty, empty, empty, empty)
        n = len(ops)
        kind = np.fromiter(map(KIND_CODES.__getitem__, map(itemgetter(0), ops)), np.int8, n)
        pipe, stage, mb = (np.fromiter(map(itemgetter(i), ops), np.int64, n) for i in (1, 2, 3))
        return cls(kind, pipe, stage, mb)

    def take(self, index) -> "OpArrays":
        """The ops at ``index`` (an index array or a mask)."""
        return OpArrays(self.kind[index], self.pipeline[index], self.stage[index], self.microbatch[index])

    def op(self, i: int) -> Op:
        return Op(KINDS[self.kind[i]], int(self.pipeline[i]), int(self.stage[i]), int(self.microbatch[i]))

    def to_ops(self) -> list[Op]:
        """Every op as an ``Op`` value (one Python object per op: not for the hot path)."""
        kinds = [KINDS[k] for k in self.kind.tolist()]
        return list(map(Op, kinds, self.pipeline.tolist(), self.stage.tolist(), self.microbatch.tolist()))

    def names(self) -> list[str]:
        """``str(op)`` of every op (``F3s2``, ``B3p1s2``), without making ``Op`` values."""
        letters = [k.value for k in KINDS]
        return [f"{letters[k]}{m}p{p}s{s}" if p else f"{letters[k]}{m}s{s}"
                for k, p, s, m in zip(self.kind.tolist(), self.pipeline.tolist(), self.stage.tolist(),
                                      self.microbatch.tolist())]

    def equals(self, other: "OpArrays") -> bool:
        return len(self) == len(other) and all(
            np.array_equal(getattr(self, f), getattr(other, f)) for f in ("kind", "pipeline", "stage", "microbatch")
        )


def segment_offsets(keys: np.ndarray, num_segments: int) -> np.ndarray:
    """Offsets (``num_segments + 1`` values) of the runs of equal values of sorted ``keys``
    in 0..num_segments-1: segment k is ``keys[offsets[k]:offsets[k+1]]``."""
    return np.searchsorted(keys, np.arange(num_segments + 1), side="left").astype(np.int64)


def data_predecessors_of(ops: OpArrays, stage_base: np.ndarray, num_microbatches: int) -> np.ndarray:
    """Index of every op's data predecessor among ``ops`` (-1: none): F(s) after F(s-1);
    B(s) after B(s+1), or after F(s) on the last stage; W(s) after B(s). ``ops`` must hold
    every op of each microbatch's chain exactly once; stage s of pipeline p has the flat id
    ``stage_base[p] + s``."""
    kind, stage = ops.kind, ops.stage
    nmb3 = 3 * num_microbatches
    keys = ((stage_base[ops.pipeline] + stage) * num_microbatches + ops.microbatch) * 3 + kind
    last = (stage_base[1:] - stage_base[:-1] - 1)[ops.pipeline]
    pred_key = np.where(kind == F_CODE, keys - nmb3,
                        np.where((kind == B_CODE) & (stage < last), keys + nmb3, keys - 1))
    has = (kind != F_CODE) | (stage > 0)
    index = np.full(int(stage_base[-1]) * nmb3, -1, np.int64)
    index[keys] = np.arange(len(keys))
    return np.where(has, index[np.where(has, pred_key, 0)], -1)


class LazyTuple:
    """A tuple of values built from arrays on first use (``tuple()``); its length, and
    equality with another of its kind, come from the arrays. Subclasses give ``__len__``,
    ``_build`` and ``_same``."""

    __slots__ = ("_tuple",)
    _tuple: tuple | None

    def __init__(self) -> None:
        self._tuple = None

    def _build(self) -> tuple:
        raise NotImplementedError

    def _same(self, other) -> bool:
        raise NotImplementedError

    def tuple(self) -> tuple:
        if self._tuple is None:
            self._tuple = self._build()
        return self._tuple

    def __len__(self) -> int:
        raise NotImplementedError

    def __getitem__(self, index):
        return self.tuple()[index]

    def __iter__(self):
        return iter(self.tuple())

    def __eq__(self, other: object) -> bool:
        if type(other) is type(self):
            return len(self) == len(other) and self._same(other)
        if isinstance(other, (tuple, list)):
            return self.tuple() == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((type(self).__name__, len(self)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(len={len(self)})"


class Orders(LazyTuple):
    """Per-device orders held as arrays: device d runs ``ops[offsets[d]:offsets[d+1]]``.

    Behaves as a tuple of tuples of ``Op`` (``orders[d]``, iteration, ``len``, equality
    with such tuples); the ``Op`` tuples are built on first use."""

    __slots__ = ("offsets", "ops")

    def __init__(self, ops: OpArrays, offsets) -> None:
        super().__init__()
        self.ops = ops
        self.offsets = frozen(offsets, np.int64)
        if len(self.offsets) < 1 or self.offsets[0] != 0 or self.offsets[-1] != len(ops) \
                or np.any(np.diff(self.offsets) < 0):
            raise ValueError("order offsets must rise from 0 to the number of ops")

    @classmethod
    def from_ops(cls, orders) -> "Orders":
        """The arrays of per-device sequences of ``Op`` (the ``Op`` values are not kept:
        ``tuple()`` builds them again on first use)."""
        orders = [order if isinstance(order, (list, tuple)) else list(order) for order in orders]
        ops = OpArrays.from_ops([op for order in orders for op in order])
        return cls(ops, np.cumsum([0] + [len(o) for o in orders], dtype=np.int64))

    def _build(self) -> tuple[tuple[Op, ...], ...]:
        ops = self.ops.to_ops()
        bounds = self.offsets.tolist()
        return tuple(tuple(ops[a:b]) for a, b in itertools.pairwise(bounds))

    def _same(self, other: "Orders") -> bool:
        return np.array_equal(self.offsets, other.offsets) and self.ops.equals(other.ops)

    def __len__(self) -> int:
        return len(self.offsets) - 1
