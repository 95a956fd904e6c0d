"""Text from users' files, escaped for the one place it goes: a TOML string, an HTML page or
a terminal. Every writer uses these three functions (docs/limits.md).

* ``toml_string``: a TOML basic string — backslash and quote escaped, every control
  character (C0, DEL, C1) and every bidirectional-override or invisible format character
  as ``\\uXXXX``, so the file parses and reads as it is written.
* ``html_text``: ``&``, ``<``, ``>``, both quotes as entities; controls and bidi overrides
  as their ``\\uXXXX`` text (a page shows them, it never acts on them).
* ``terminal_text``: controls as ``\\xNN`` (``\\t``, ``\\n``, ``\\r`` by name) and bidi
  overrides and invisible format characters as ``\\uXXXX``, so text from a file can neither
  drive the terminal (escape sequences) nor reorder what it shows (U+202E and friends).
"""

from __future__ import annotations

import html

# U+061C, U+200E/F, U+202A-202E (embeddings and overrides), U+2066-2069 (isolates),
# U+200B-200D and U+2060 (zero-width characters), U+FEFF (byte-order mark)
_FORMAT = (0x061C, 0x200B, 0x200C, 0x200D, 0x200E, 0x200F, *range(0x202A, 0x202F), 0x2060,
           *range(0x2066, 0x206A), 0xFEFF)
_CONTROLS = (*range(32), 127, *range(0x80, 0xA0))

_TERMINAL = {i: f"\\x{i:02x}" for i in _CONTROLS} | {ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r"}
_TERMINAL.update({i: f"\\u{i:04x}" for i in _FORMAT})
_TOML = {ord("\\"): "\\\\", ord('"'): '\\"'} | {i: f"\\u{i:04X}" for i in (*_CONTROLS, *_FORMAT)}
_HTML_UNSEEN = {i: f"\\u{i:04x}" for i in (*_CONTROLS, *_FORMAT) if chr(i) not in "\t\n"}


def terminal_text(text: object) -> str:
    """``text`` safe to print on a terminal (module docstring)."""
    return str(text).translate(_TERMINAL)


def toml_string(text: object) -> str:
    """``text`` as a quoted TOML basic string (module docstring)."""
    return '"' + str(text).translate(_TOML) + '"'


def html_text(text: object) -> str:
    """``text`` safe inside an HTML element or a quoted attribute (module docstring)."""
    return html.escape(str(text).translate(_HTML_UNSEEN), quote=True)
