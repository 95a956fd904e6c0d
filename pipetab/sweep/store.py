"""The results store: one SQLite file, one row per configuration.

Table ``results``: ``key`` (the configuration's stable hash, PRIMARY KEY -- so UNIQUE),
``sweep`` (name of the sweep that first produced it), ``label``, ``config`` (the canonical
configuration, JSON), ``row`` (the result, JSON), ``created`` (unix time). Rows are written
with INSERT OR IGNORE and committed one task at a time, so a run killed mid-way keeps
everything it finished, and a re-run skips what is there and never duplicates a row.

Table ``errors``: the last error of configurations that failed (retried on the next run;
removed when they succeed). Only the process driving a sweep writes; workers return rows.
"""

from __future__ import annotations

import csv
import json
import sqlite3
import time
from pathlib import Path
from typing import Iterable, Self

_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    key     TEXT NOT NULL PRIMARY KEY,
    sweep   TEXT NOT NULL,
    label   TEXT NOT NULL,
    config  TEXT NOT NULL,
    row     TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS errors (
    key     TEXT NOT NULL PRIMARY KEY,
    sweep   TEXT NOT NULL,
    label   TEXT NOT NULL,
    error   TEXT NOT NULL,
    created REAL NOT NULL
);
"""


class ResultStore:
    """A results store at ``path`` (created with its folder if missing)."""

    def __init__(self, path: str | Path):
        from pipetab.files import check_target

        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            check_target(self.path, "results store")  # never a link planted where the store goes
            self._db = sqlite3.connect(str(self.path), timeout=60)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise ValueError(f"cannot open results store {str(self.path)!r}: {exc}") from None

    # ---- context -----------------------------------------------------------------------
    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- writing -------------------------------------------------------------------------
    def add(self, key: str, row: dict, *, sweep: str = "", label: str = "", config: dict | None = None) -> bool:
        """Store ``row`` under ``key`` unless a row is there; True when inserted."""
        return self.add_many([(key, row, label, config)], sweep=sweep) == 1

    def add_many(self, items: Iterable[tuple[str, dict, str, dict | None]], *, sweep: str = "") -> int:
        """Store (key, row, label, config) items in one transaction; returns how many were
        new (the others were already there and are left as they are)."""
        now = time.time()
        new = 0
        with self._db:
            for key, row, label, config in items:
                cur = self._db.execute(
                    "INSERT OR IGNORE INTO results (key, sweep, label, config, row, created) VALUES (?,?,?,?,?,?)",
                    (key, sweep, label, json.dumps(config or {}, sort_keys=True), json.dumps(row), now),
                )
                new += cur.rowcount
                self._db.execute("DELETE FROM errors WHERE key = ?", (key,))
        return new

    def add_error(self, key: str, message: str, *, sweep: str = "", label: str = "") -> None:
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO errors (key, sweep, label, error, created) VALUES (?,?,?,?,?)",
                (key, sweep, label, message, time.time()),
            )

    # ---- reading -------------------------------------------------------------------------
    def done_keys(self, keys: Iterable[str] | None = None) -> set[str]:
        """Keys with a stored row (restricted to ``keys`` when given)."""
        if keys is None:
            return {k for (k,) in self._db.execute("SELECT key FROM results")}
        wanted = list(keys)
        done: set[str] = set()
        for i in range(0, len(wanted), 500):
            chunk = wanted[i:i + 500]
            q = f"SELECT key FROM results WHERE key IN ({','.join('?' * len(chunk))})"
            done.update(k for (k,) in self._db.execute(q, chunk))
        return done

    def errors(self) -> list[dict]:
        cur = self._db.execute("SELECT key, sweep, label, error FROM errors ORDER BY created")
        return [dict(zip(("key", "sweep", "label", "error"), r)) for r in cur]

    def count(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0]

    def rows(self, keys: Iterable[str] | None = None) -> list[dict]:
        """Stored rows (each with its ``key``), in the order of ``keys`` when given (keys
        without a row are left out), else in insertion order."""
        if keys is None:
            cur = self._db.execute("SELECT key, row FROM results ORDER BY rowid")
            return [{"key": k, **json.loads(r)} for k, r in cur]
        wanted = list(keys)
        found: dict[str, dict] = {}
        for i in range(0, len(wanted), 500):
            chunk = wanted[i:i + 500]
            q = f"SELECT key, row FROM results WHERE key IN ({','.join('?' * len(chunk))})"
            for k, r in self._db.execute(q, chunk):
                found[k] = {"key": k, **json.loads(r)}
        return [found[k] for k in wanted if k in found]

    def frame(self, keys: Iterable[str] | None = None):
        """The rows as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame(self.rows(keys))

    def export(self, path: str | Path, keys: Iterable[str] | None = None) -> int:
        """Write the rows (of ``keys``, or all) to ``path`` (.csv or .parquet); returns the
        number of rows written."""
        return export_rows(self.rows(keys), path)


def export_rows(rows: list[dict], path: str | Path) -> int:
    """Write rows to a .csv or .parquet file (Parquet needs pyarrow or fastparquet)."""
    import importlib.util

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise ValueError(f"export file must end in .csv or .parquet, got {str(path)!r}")
    if suffix == ".parquet" and not (importlib.util.find_spec("pyarrow") or importlib.util.find_spec("fastparquet")):
        raise ValueError("exporting to Parquet needs pyarrow: pip install pyarrow (or export to .csv)")
    from pipetab.files import write_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".parquet":
        import pandas as pd

        write_atomic(path, lambda tmp: pd.DataFrame(rows).to_parquet(tmp, index=False), "export file")
        return len(rows)
    columns = list(dict.fromkeys(k for r in rows for k in r))  # every field, in order of first use

    def write(tmp: Path) -> None:
        with tmp.open("w", newline="", encoding="utf-8") as fh:  # csv, not pandas: no 0.3-1 s import
            writer = csv.DictWriter(fh, fieldnames=columns, restval="")
            writer.writeheader()
            writer.writerows({k: "" if v is None else v for k, v in r.items()} for r in rows)

    write_atomic(path, write, "export file")  # a full disk or Ctrl-C leaves no partial file
    return len(rows)
