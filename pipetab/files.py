"""Writing output files safely, and showing text that came from files.

Every file pipetab writes (pictures, pages, traces, fitted systems, sweep exports, the
demo's results) goes through ``write_atomic``: the target must be a regular file or not
exist yet (never a symbolic link, FIFO, device or folder: a link planted where an output
goes is not followed), the content is written to a new temporary file in the target's own
folder and renamed onto the target only once complete. A full disk, a permission error or
Ctrl-C leaves the old file (or none) and no partial one.

``printable`` escapes control characters (terminal escape sequences included) in text read
from a user's file before it is shown on a terminal.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Callable

from pipetab.schedules.text import terminal_text


def check_target(path: str | Path, what: str = "output") -> Path:
    """``path`` as an output file: ``ValueError`` naming ``what`` when it is a symbolic link,
    exists and is not a regular file, or its folder does not exist."""
    path = Path(path)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise ValueError(f"{what} {str(path)!r} cannot be written: {exc.strerror or exc}") from None
    if info is not None and stat.S_ISLNK(info.st_mode):
        raise ValueError(f"{what} {str(path)!r} is a symbolic link; pipetab does not write through a link "
                         "(give the file it points to, or another name)")
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise ValueError(f"{what} {str(path)!r} is a folder, not a file")
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{what} {str(path)!r} is not a regular file (a FIFO, socket or device); "
                         "give a file name")
    if not path.parent.is_dir():
        raise ValueError(f"{what} {str(path)!r}: folder {str(path.parent)!r} does not exist")
    return path


def write_atomic(path: str | Path, write: Callable[[Path], object], what: str = "output") -> Path:
    """Run ``write(tmp)`` on a new temporary file beside ``path``, then rename it onto
    ``path`` (module docstring). A failure to write is a ``ValueError`` naming ``what``;
    the temporary file is removed whatever happens."""
    path = check_target(path, what)
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    except OSError as exc:
        raise ValueError(f"{what} {str(path)!r} cannot be written: {exc.strerror or exc}") from None
    tmp = Path(name)
    try:
        os.close(fd)
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as an ordinary new file (mkstemp makes it 0600)
        check_target(path, what)  # nothing was planted there while writing
        os.replace(tmp, path)
    except OSError as exc:
        raise ValueError(f"{what} {str(path)!r} cannot be written: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return path


def safe_name(name: str, what: str = "name") -> str:
    """``name`` as one file name inside a folder: ``ValueError`` when it is empty, has a
    path separator, is ``.`` or ``..``, or holds control characters."""
    if (not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name
            or any(ord(c) < 32 or ord(c) == 127 for c in name)):
        raise ValueError(f"{what} must be a plain file name (no '/', '..' or control characters), "
                         f"got {printable(name)!r}")
    return name


def printable(text: object) -> str:
    """``text`` with every control character (ESC of a terminal escape sequence, newlines,
    C1 controls) and bidirectional override written as an escape, so text from a file can
    neither act on the terminal nor reorder what it shows (``schedules.text``)."""
    return terminal_text(text)
