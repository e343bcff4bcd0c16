"""A whole-file JSON document (a peer's report), parsed with errors that name the line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from yaotu_trace.data.compressed import read_text
from yaotu_trace.errors import TraceReadError


def read_json_document(path: Path, hint: str) -> Any:
    """The document in `path` (plain or compressed); `hint` says how to save it right when
    the bytes are not UTF-8. Invalid JSON is one line naming its line and column."""
    text = read_text(path, hint)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceReadError(
            f"{path}: line {exc.lineno}, column {exc.colno}: invalid JSON ({exc.msg}); check "
            "the file is complete"
        ) from exc
    except (ValueError, RecursionError) as exc:
        raise TraceReadError(f"{path}: invalid JSON; check the file is complete") from exc
