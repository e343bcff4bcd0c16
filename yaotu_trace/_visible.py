"""Text made safe for a terminal: control characters shown as escapes, never acted on.

A file name, tenant or model comes from the input and may hold anything a file system or a
JSON string allows, "\x1b[31m" included; written raw, a terminal would act on it (colour,
cursor moves, a cleared screen, a retitled window). Reports and errors show it escaped instead,
as `repr` would: `\x1b[31m`.
"""

from __future__ import annotations

# C0 controls, DEL and C1 controls (0x9b alone starts a sequence on some terminals).
_CONTROLS = (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0))
_IN_TEXT = {c: f"\\x{c:02x}" for c in _CONTROLS if chr(c) not in "\n\t"}
_IN_LINE = {c: f"\\x{c:02x}" for c in _CONTROLS}


def visible(text: str, *, one_line: bool = False) -> str:
    """`text` with every control character but newline and tab written as `\\xNN`; with
    `one_line`, newline and tab too (an error is one line)."""
    return text.translate(_IN_LINE if one_line else _IN_TEXT)
