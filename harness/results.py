"""The results folder of one run, written as the run goes so that nothing finished is lost.

Layout of ``<out>/``:

- ``run.json``      written first: the command, its arguments, the machine, the start time;
- ``rows.jsonl``    one JSON line per finished row, appended (and flushed) at once;
- ``INTERRUPTED``   present while a run is cut short (Ctrl-C, SIGTERM, a crash): what happened,
                    how many rows were kept, and the command that finishes it (``--resume``);
- ``results.json``, ``results.csv``, ``results.md`` (and plots): written at the end, also after an
  interruption (marked ``"interrupted": true``).

A folder is never shared: the default name carries the UTC time, the process id and a random
suffix, and is created with ``exist_ok=False``; an explicit ``--out`` must be new or empty (or the
folder of the run being resumed). Problems with ``--out`` are found before anything runs.
"""
from __future__ import annotations

import datetime as _dt
import itertools
import json
import os
import secrets
import time
from pathlib import Path

from .jsonsafe import dumps
from .rows_file import read_rows  # noqa: F401  (the run folder's rows.jsonl reader)


class ResultsError(ValueError):
    """A bad --out / --resume folder (the CLI's one-line error, exit 2)."""


_SEQ = itertools.count()


#: where run folders go without --out: ``results/`` under the current directory
DEFAULT_ROOT = Path("results")


def default_dir(root: Path | str | None = None) -> Path:
    """``root/<UTC time>-<pid>-<n>-<random>`` (``root``: ``DEFAULT_ROOT`` when None): unique within
    a process by its counter, across processes by the pid, and across hosts sharing a folder by the
    random part."""
    root = DEFAULT_ROOT if root is None else root
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return Path(root) / f"{now}-{os.getpid()}-{next(_SEQ)}-{secrets.token_hex(3)}"


NO_STORE = object()   # ResultsDir(..., store=NO_STORE): the run is not recorded in a store


class ResultsDir:
    """``store``: the results store the run is also written into (``harness.store``: a URL, or
    None for the default ``results/runs.sqlite``; ``NO_STORE`` for none). It is opened before the
    folder is created, so a bad --store leaves nothing behind; ``write_meta`` starts the store's
    run (its uid is kept in ``run.json`` as ``store_uid``, which ``--resume`` and ``import`` use to
    find it again), every ``append`` writes the row (or event) there too as it finishes, and
    ``close`` records the final ``results.json`` (metrics, line counts, summary, state)."""

    def __init__(self, path: Path | str | None, resume: bool = False, store=NO_STORE):
        self._rec = None
        self._opened = time.time()
        if path is not None:
            p = Path(path)
            if p.exists() and not p.is_dir():
                raise ResultsError(f"--out: {p} exists and is not a folder")
            if resume and not (p / "run.json").is_file():
                raise ResultsError(f"--resume: {p} holds no run.json (not a results folder)")
            if not resume and p.is_dir() and any(p.iterdir()):
                raise ResultsError(f"--out: {p} is not empty (choose a new folder, or "
                                   f"--resume it to finish an interrupted run)")
        if store is not NO_STORE:
            from .store import open_store
            self._store = open_store(store)
        else:
            self._store = None
        if path is None:
            path = default_dir()
            self.path = Path(path)
            try:
                self.path.mkdir(parents=True, exist_ok=False)
            except OSError as e:
                raise ResultsError(f"--out: cannot create {self.path}: {e.strerror or e}") from None
        else:
            self.path = Path(path)
            if self.path.exists() and not self.path.is_dir():
                raise ResultsError(f"--out: {self.path} exists and is not a folder")
            if resume:
                if not (self.path / "run.json").is_file():
                    raise ResultsError(f"--resume: {self.path} holds no run.json (not a results folder)")
            elif self.path.is_dir() and any(self.path.iterdir()):
                raise ResultsError(f"--out: {self.path} is not empty (choose a new folder, or "
                                   f"--resume it to finish an interrupted run)")
            try:
                self.path.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise ResultsError(f"--out: cannot create {self.path}: {e.strerror or e}") from None
        probe = self.path / ".write-test"
        try:
            probe.write_text("")
            probe.unlink()
        except OSError as e:
            raise ResultsError(f"--out: cannot write into {self.path}: {e.strerror or e}") from None
        self._rows = None

    # -- the record as the run goes ------------------------------------------------------------
    def write_meta(self, meta: dict) -> None:
        if self._store is not None:
            import uuid
            from .store import Recorder
            meta = dict(meta, store_uid=uuid.uuid4().hex)
            self._rec = Recorder(self._store, meta, kind="compare", uid=meta["store_uid"],
                                 folder=str(self.path))
        (self.path / "run.json").write_text(dumps(meta, indent=1))

    def _resume_store(self) -> None:
        """A resumed run continues its store run (found by ``store_uid``; a new one in a store
        that never had it)."""
        if self._store is None or self._rec is not None:
            return
        from .store import Recorder
        meta = self.read_meta()
        self._rec = Recorder(self._store, meta, kind="compare", uid=meta.get("store_uid"),
                             folder=str(self.path))

    def read_meta(self) -> dict:
        return json.loads((self.path / "run.json").read_text())

    def append(self, row: dict) -> None:
        # the store first, then rows.jsonl: a run killed between the two has the row in the store
        # (and --resume redoes it there, an upsert), so every row of rows.jsonl is in the store
        if self._rec is None and self._store is not None and (self.path / "run.json").is_file():
            self._resume_store()
        if self._rec is not None:
            if "_event" in row:
                self._rec.event(row["_event"], {k: v for k, v in row.items() if k != "_event"})
            else:
                self._rec.row(row)
        if self._rows is None:
            self._rows = open(self.path / "rows.jsonl", "a", encoding="utf-8")
        self._rows.write(dumps(row) + "\n")
        self._rows.flush()
        os.fsync(self._rows.fileno())

    def append_event(self, kind: str, **data) -> None:
        """Run-level facts that arrive mid-run (ceilings, vendor GEMM times) go into the same
        stream, so a resumed run gets them back."""
        self.append({"_event": kind, **data})

    def rows(self) -> tuple[list[dict], list[dict]]:
        """(rows, events) recorded so far; a torn last line (killed mid-write) is dropped."""
        return read_rows(self.path / "rows.jsonl")

    def mark_interrupted(self, why: str, n_rows: int, resume_cmd: str) -> None:
        (self.path / "INTERRUPTED").write_text(
            f"{why}\n{n_rows} finished row(s) are in rows.jsonl.\nFinish the run with:\n  {resume_cmd}\n")

    def clear_interrupted(self) -> None:
        try:
            (self.path / "INTERRUPTED").unlink()
        except FileNotFoundError:
            pass

    @property
    def interrupted(self) -> bool:
        return (self.path / "INTERRUPTED").exists()

    def close(self) -> None:
        if self._rows is not None:
            self._rows.close()
            self._rows = None
        if self._store is not None:
            res = self.path / "results.json"
            if self._rec is None and (self.path / "run.json").is_file():
                self._resume_store()
            if self._rec is not None and res.is_file() and res.stat().st_mtime >= self._opened - 1:
                try:
                    doc = json.loads(res.read_text())
                except (OSError, json.JSONDecodeError):
                    doc = None
                if doc is not None:
                    self._rec.finish(doc, "interrupted" if self.interrupted else "done")
            self._store.close()
            self._store = None
            self._rec = None


def row_key(r: dict) -> tuple:
    """What identifies a finished row for ``--resume``."""
    return (r.get("phase", "timed"), r["problem"], r["impl"], r["case"]["id"])
