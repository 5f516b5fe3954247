"""A run folder's ``rows.jsonl``: one JSON object a line, rows and events (``_event``) as they
finished. Read by the results folder and by the store's import (neither imports the other for it)."""
from __future__ import annotations

import json
from pathlib import Path


def read_rows(path: Path | str) -> tuple[list[dict], list[dict]]:
    """(rows, events) of a ``rows.jsonl``; a torn last line (killed mid-write) is dropped."""
    p = Path(path)
    rows, events = [], []
    if p.is_file():
        for line in p.read_text(encoding="utf-8").splitlines():
            try:
                d = json.loads(line)
            except json.JSONDecodeError:
                continue
            (events if "_event" in d else rows).append(d)
    return rows, events
