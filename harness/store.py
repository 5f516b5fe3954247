"""The results store: every run (machine, versions, ceilings, command, every row as it finishes) in
one database, an embedded SQLite file by default or a PostgreSQL server.

``open_store(url)`` takes:

- ``None``: ``results/runs.sqlite`` under the current directory (created, with ``results/``, on the
  first write);
- a file path, ``sqlite:///ABSOLUTE/PATH`` or ``sqlite:RELATIVE/PATH``: that SQLite file;
- ``postgresql://user[:password]@host[:port]/db`` (or ``postgres://``): a PostgreSQL server, through
  psycopg 3 (the ``store`` extra).

Library: the standard ``sqlite3`` module and psycopg 3, with the SQL written here once for both
(the two dialects differ in this schema only in the auto-increment key and the placeholder). The
store needs a handful of statements, ``INSERT ... ON CONFLICT DO UPDATE`` and ``RETURNING``, which
both engines have; an ORM or SQLAlchemy Core would add a large dependency for no statement we
cannot write portably.

Durability and concurrency: every row is its own committed transaction the moment it finishes
(SQLite in WAL mode with ``synchronous=FULL``; PostgreSQL commits are durable), so a run killed at
any moment loses no finished row; several processes write one store at once (SQLite's writer lock
with a 60 s busy timeout, PostgreSQL's row locks); a row is keyed by (run, phase, problem,
implementation, case) and written with an upsert, so a resumed run or a repeated import replaces
rather than duplicates.

Schema: versioned (``schema_version`` in ``store_meta``, one line per applied step in
``store_migrations``); ``MIGRATIONS`` holds every step from an empty database, applied in order
under a lock (SQLite ``BEGIN IMMEDIATE``, PostgreSQL an advisory lock) when a writer opens the
store. A store written by a newer schema than this harness knows is refused, read or write.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re
import threading
import uuid
from contextlib import contextmanager
from pathlib import Path

from .jsonsafe import dumps

DEFAULT_PATH = Path("results") / "runs.sqlite"
_PG_LOCK = 0x6B6C5354   # the advisory lock taken while migrating a PostgreSQL store


class StoreError(ValueError):
    """A bad --store, an unknown run, a store of a newer schema: the CLI's one line, exit 2."""


# -- schema ------------------------------------------------------------------------------------
# {AUTO} is the auto-increment primary key of the dialect. Each step is a list of statements.
MIGRATIONS: list[tuple[int, str, list[str]]] = [
    (1, "runs, rows, events", [
        """CREATE TABLE runs (
             id {AUTO},
             uid TEXT NOT NULL UNIQUE,
             kind TEXT NOT NULL,
             state TEXT NOT NULL,
             created TEXT,
             finished TEXT,
             command TEXT,
             suite TEXT,
             device TEXT,
             gpu TEXT,
             hostname TEXT,
             folder TEXT,
             machine TEXT,
             ceilings TEXT,
             vendor TEXT,
             timing TEXT,
             extra TEXT)""",
        """CREATE TABLE rows (
             id {AUTO},
             run_id BIGINT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
             phase TEXT NOT NULL,
             problem TEXT NOT NULL,
             impl TEXT NOT NULL,
             case_id TEXT NOT NULL,
             layer TEXT,
             role TEXT,
             status TEXT,
             kind TEXT,
             dtype TEXT,
             median_s DOUBLE PRECISION,
             q1_s DOUBLE PRECISION,
             q3_s DOUBLE PRECISION,
             data TEXT NOT NULL,
             UNIQUE (run_id, phase, problem, impl, case_id))""",
        """CREATE TABLE events (
             id {AUTO},
             run_id BIGINT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
             kind TEXT NOT NULL,
             data TEXT NOT NULL)""",
    ]),
    (2, "indexes for the listings and the per-GPU views", [
        "CREATE INDEX rows_run_problem ON rows (run_id, problem)",
        "CREATE INDEX runs_gpu ON runs (gpu)",
        "CREATE INDEX events_run ON events (run_id)",
    ]),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]

_AUTO = {"sqlite": "INTEGER PRIMARY KEY AUTOINCREMENT", "postgresql": "BIGSERIAL PRIMARY KEY"}


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _j(obj) -> str | None:
    return None if obj is None else dumps(obj)


def _unj(text):
    return None if text is None else json.loads(text)


def redact(url: str) -> str:
    """A store URL without its password (for messages)."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


def parse_url(url: str | None) -> tuple[str, str]:
    """(dialect, target): ``("sqlite", path)`` or ``("postgresql", conninfo url)``."""
    if url is None:
        return "sqlite", str(DEFAULT_PATH)
    if not isinstance(url, str) or not url.strip():
        raise StoreError(f"--store: expected a file path or a postgresql:// URL, got {url!r}")
    u = url.strip()
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*):(.*)$", u)
    if m and len(m.group(1)) > 1:   # not a Windows drive letter
        scheme, rest = m.group(1).lower(), m.group(2)
        if scheme in ("postgresql", "postgres"):
            if not rest.startswith("//") or not re.match(r"^//[^/]*(/[^/?#]+)", rest):
                raise StoreError(f"--store: malformed PostgreSQL URL {redact(u)!r} "
                                 f"(expected postgresql://user@host[:port]/database)")
            hostport = rest[2:].split("/", 1)[0].rsplit("@", 1)[-1]
            port = hostport.rsplit("]", 1)[-1].partition(":")[2]
            if port and not port.isdigit():
                raise StoreError(f"--store: malformed PostgreSQL URL {redact(u)!r} (port {port!r})")
            return "postgresql", u
        if scheme == "sqlite":
            # sqlite:///abs/path (a file URI's three slashes) or sqlite:relative/path
            path = rest[2:] if rest.startswith("///") else rest[2:] if rest.startswith("//") else rest
            if not path:
                raise StoreError(f"--store: malformed SQLite URL {u!r} (expected sqlite:///PATH)")
            return "sqlite", path
        raise StoreError(f"--store: unknown scheme {scheme!r} in {redact(u)!r} "
                         f"(a file path, sqlite:///PATH or postgresql://user@host/db)")
    return "sqlite", u


def describe(url: str | None) -> str:
    d, t = parse_url(url)
    return t if d == "sqlite" else redact(t)


# -- the store ---------------------------------------------------------------------------------
class Store:
    """One connection to a store (thread-safe: one statement at a time)."""

    def __init__(self, url: str | None = None, *, create: bool = True):
        self.url = url
        self.dialect, target = parse_url(url)
        self.where = target if self.dialect == "sqlite" else redact(target)
        self._lock = threading.RLock()
        if self.dialect == "sqlite":
            self._open_sqlite(Path(target), create, default=url is None)
        else:
            self._open_pg(target)
        try:
            self._check_schema(migrate=create)
        except BaseException:
            self.close()
            raise

    # -- connections --------------------------------------------------------------------------
    def _open_sqlite(self, path: Path, create: bool, default: bool) -> None:
        import sqlite3
        self._errors = (sqlite3.Error,)
        if path.exists() and not path.is_file():
            raise StoreError(f"--store: {path} exists and is not a file")
        if not path.exists():
            if not create:
                raise StoreError(f"--store: no store at {path} (no run has been recorded there)")
            if default:
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                except OSError as e:
                    raise StoreError(f"--store: cannot create {path.parent}: {e.strerror or e}") from None
            elif not path.parent.is_dir():
                raise StoreError(f"--store: cannot create {path}: the folder {path.parent} does not exist")
        else:
            with open(path, "rb") as f:
                head = f.read(16)
            if head and head != b"SQLite format 3\x00":
                raise StoreError(f"--store: {path} is not an SQLite database")
        try:
            self._conn = sqlite3.connect(str(path), timeout=60.0, isolation_level=None,
                                         check_same_thread=False)
            self._conn.execute("PRAGMA busy_timeout = 60000")
            if create:
                self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = FULL")
            self._conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error as e:
            raise StoreError(f"--store: cannot open {path}: {e}") from None

    def _open_pg(self, url: str) -> None:
        try:
            import psycopg
        except ImportError:
            raise StoreError("--store: a PostgreSQL store needs psycopg 3 "
                             "(pip install 'kernel-layers[store]')") from None
        self._errors = (psycopg.Error,)
        try:
            self._conn = psycopg.connect(url, autocommit=True, connect_timeout=10)
        except psycopg.Error as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise StoreError(f"--store: cannot connect to {redact(url)}: {first}") from None

    def close(self) -> None:
        c = getattr(self, "_conn", None)
        if c is not None:
            try:
                c.close()
            finally:
                self._conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- SQL ----------------------------------------------------------------------------------
    def _sql(self, q: str) -> str:
        return q.replace("?", "%s") if self.dialect == "postgresql" else q

    def _exec(self, q: str, params=()):
        with self._lock:
            return self._conn.execute(self._sql(q), params)

    def _all(self, q: str, params=()) -> list[tuple]:
        with self._lock:
            return list(self._conn.execute(self._sql(q), params).fetchall())

    def _one(self, q: str, params=()):
        with self._lock:
            return self._conn.execute(self._sql(q), params).fetchone()

    @contextmanager
    def _tx(self, immediate: bool = False):
        """One transaction (SQLite: ``BEGIN IMMEDIATE`` takes the writer lock at once)."""
        with self._lock:
            if self.dialect == "postgresql":
                with self._conn.transaction():
                    yield self._conn
            else:
                self._conn.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
                try:
                    yield self._conn
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                self._conn.execute("COMMIT")

    def _tables(self) -> set[str]:
        if self.dialect == "sqlite":
            return {r[0] for r in self._all("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return {r[0] for r in self._all("SELECT table_name FROM information_schema.tables "
                                        "WHERE table_schema = current_schema()")}

    def _version(self) -> int:
        if "store_meta" not in self._tables():
            return 0
        row = self._one("SELECT value FROM store_meta WHERE key = 'schema_version'")
        return int(row[0]) if row else 0

    def _check_schema(self, migrate: bool) -> None:
        try:
            v = self._version()
            if v > SCHEMA_VERSION:
                raise StoreError(f"--store: {self.where} was written by a newer schema (version {v}; "
                                 f"this harness knows up to {SCHEMA_VERSION}): upgrade the harness")
            if v == SCHEMA_VERSION:
                return
            if not migrate:
                if v == 0:
                    raise StoreError(f"--store: {self.where} holds no results store")
                # an older store is read as it is only after its migration: a reader migrates too
            self._migrate()
        except self._errors as e:
            raise StoreError(f"--store: {self.where}: {type(e).__name__}: {e}") from None

    def _migrate(self) -> None:
        with self._tx(immediate=True) as c:
            if self.dialect == "postgresql":
                c.execute("SELECT pg_advisory_xact_lock(%s)", (_PG_LOCK,))
            # read again under the lock: another process may have migrated meanwhile
            if "store_meta" not in self._tables():
                c.execute(self._sql("CREATE TABLE store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"))
                c.execute(self._sql("CREATE TABLE store_migrations (version BIGINT PRIMARY KEY, "
                                    "what TEXT NOT NULL, applied TEXT NOT NULL)"))
                c.execute(self._sql("INSERT INTO store_meta (key, value) VALUES ('schema_version', '0')"))
            row = c.execute(self._sql("SELECT value FROM store_meta WHERE key = 'schema_version'")).fetchone()
            v = int(row[0])
            if v > SCHEMA_VERSION:
                raise StoreError(f"--store: {self.where} was written by a newer schema (version {v}; "
                                 f"this harness knows up to {SCHEMA_VERSION}): upgrade the harness")
            for version, what, statements in MIGRATIONS:
                if version <= v:
                    continue
                for s in statements:
                    c.execute(s.replace("{AUTO}", _AUTO[self.dialect]))
                c.execute(self._sql("INSERT INTO store_migrations (version, what, applied) VALUES (?, ?, ?)"),
                          (version, what, _now()))
                c.execute(self._sql("UPDATE store_meta SET value = ? WHERE key = 'schema_version'"),
                          (str(version),))

    @property
    def schema_version(self) -> int:
        return self._version()

    # -- writing a run ------------------------------------------------------------------------
    def begin_run(self, meta: dict, *, kind: str, uid: str | None = None, folder: str | None = None,
                  state: str = "running") -> int:
        """A new run (or the run ``uid`` names, when it exists: a resumed run, a repeated import);
        returns its id."""
        uid = uid or uuid.uuid4().hex
        machine = meta.get("machine") or {}
        vals = dict(uid=uid, kind=kind, state=state, created=meta.get("created"),
                    command=meta.get("command"), suite=meta.get("suite"),
                    device=meta.get("device") or machine.get("device"), gpu=machine.get("gpu"),
                    hostname=machine.get("hostname"), folder=folder, machine=_j(machine or None),
                    ceilings=_j(meta.get("ceilings")), vendor=_j(meta.get("vendor_same_shape")),
                    timing=_j(meta.get("timing")))
        cols = list(vals)
        upd = ", ".join(f"{c} = COALESCE(excluded.{c}, runs.{c})" for c in cols if c != "uid")
        with self._tx():
            row = self._conn.execute(self._sql(
                f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
                f"ON CONFLICT (uid) DO UPDATE SET {upd} RETURNING id"), [vals[c] for c in cols]).fetchone()
        return int(row[0])

    @staticmethod
    def _row_values(run_id: int, r: dict) -> list:
        case = r.get("case") or {}
        cid = case.get("id") if isinstance(case, dict) else str(case)
        t = r.get("time") if isinstance(r.get("time"), dict) else {}
        return [run_id, r.get("phase") or "timed", r.get("problem") or "?", r.get("impl") or "?",
                cid or "?", r.get("layer"), r.get("role"), r.get("status"), r.get("kind"),
                case.get("dtype") if isinstance(case, dict) else None,
                t.get("median_s"), t.get("q1_s"), t.get("q3_s"), dumps(r)]

    _ROW_SQL = ("INSERT INTO rows (run_id, phase, problem, impl, case_id, layer, role, status, kind, dtype, "
                "median_s, q1_s, q3_s, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (run_id, phase, problem, impl, case_id) DO UPDATE SET layer = excluded.layer, "
                "role = excluded.role, status = excluded.status, kind = excluded.kind, dtype = excluded.dtype, "
                "median_s = excluded.median_s, q1_s = excluded.q1_s, q3_s = excluded.q3_s, data = excluded.data")

    def add_row(self, run_id: int, row: dict) -> None:
        """One finished row, committed at once."""
        with self._tx():
            self._conn.execute(self._sql(self._ROW_SQL), self._row_values(run_id, row))

    def add_rows(self, run_id: int, rows: list[dict]) -> None:
        with self._tx():
            cur = self._conn.cursor()
            cur.executemany(self._sql(self._ROW_SQL), [self._row_values(run_id, r) for r in rows])

    def add_event(self, run_id: int, kind: str, data: dict) -> None:
        with self._tx():
            self._conn.execute(self._sql("INSERT INTO events (run_id, kind, data) VALUES (?, ?, ?)"),
                               (run_id, kind, dumps(data)))
            if kind == "ceilings" and data.get("ceilings"):
                self._conn.execute(self._sql("UPDATE runs SET ceilings = ? WHERE id = ?"),
                                   (_j(data["ceilings"]), run_id))

    def finish_run(self, run_id: int, doc: dict, state: str | None = None) -> None:
        """The run's final document: every row (with its metrics and line counts) replaces the one
        written as it finished; ceilings, vendor times, timing, summary; the state."""
        state = state or ("interrupted" if doc.get("interrupted") else "done")
        extra = {k: v for k, v in doc.items() if k not in (
            "rows", "machine", "ceilings", "vendor_same_shape", "timing", "command", "created", "suite",
            "store_run")}
        with self._tx():
            cur = self._conn.cursor()
            cur.executemany(self._sql(self._ROW_SQL), [self._row_values(run_id, r) for r in doc.get("rows", [])])
            self._conn.execute(self._sql(
                "UPDATE runs SET state = ?, finished = ?, ceilings = COALESCE(?, ceilings), "
                "vendor = COALESCE(?, vendor), timing = COALESCE(?, timing), suite = COALESCE(?, suite), "
                "machine = COALESCE(?, machine), gpu = COALESCE(?, gpu), extra = ? WHERE id = ?"),
                (state, _now(), _j(doc.get("ceilings")), _j(doc.get("vendor_same_shape") or None),
                 _j(doc.get("timing")), doc.get("suite"), _j(doc.get("machine")),
                 (doc.get("machine") or {}).get("gpu"), _j(extra), run_id))

    def set_state(self, run_id: int, state: str) -> None:
        with self._tx():
            self._conn.execute(self._sql("UPDATE runs SET state = ?, finished = ? WHERE id = ?"),
                               (state, _now(), run_id))

    # -- reading ------------------------------------------------------------------------------
    _RUN_COLS = ("id", "uid", "kind", "state", "created", "finished", "command", "suite", "device", "gpu",
                 "hostname", "folder")

    def list_runs(self, gpu: str | None = None) -> list[dict]:
        q = (f"SELECT {', '.join('r.' + c for c in self._RUN_COLS)}, COUNT(w.id), "
             "SUM(CASE WHEN w.status = 'PASS' THEN 1 ELSE 0 END), "
             "SUM(CASE WHEN w.status = 'FAIL' THEN 1 ELSE 0 END), "
             "SUM(CASE WHEN w.status = 'SKIP' THEN 1 ELSE 0 END) "
             "FROM runs r LEFT JOIN rows w ON w.run_id = r.id "
             + ("WHERE r.gpu = ? " if gpu else "") +
             f"GROUP BY {', '.join('r.' + c for c in self._RUN_COLS)} ORDER BY r.id")
        out = []
        for t in self._all(q, (gpu,) if gpu else ()):
            d = dict(zip(self._RUN_COLS, t))
            d.update(rows=int(t[-4] or 0), PASS=int(t[-3] or 0), FAIL=int(t[-2] or 0), SKIP=int(t[-1] or 0))
            out.append(d)
        return out

    def run_id_for_uid(self, uid: str) -> int | None:
        row = self._one("SELECT id FROM runs WHERE uid = ?", (uid,))
        return int(row[0]) if row else None

    def get_run(self, run_id: int) -> dict:
        cols = self._RUN_COLS + ("machine", "ceilings", "vendor", "timing", "extra")
        row = self._one(f"SELECT {', '.join(cols)} FROM runs WHERE id = ?", (int(run_id),))
        if row is None:
            raise StoreError(f"run {run_id}: no such run in {self.where} (see python -m harness runs)")
        d = dict(zip(cols, row))
        for k in ("machine", "ceilings", "vendor", "timing", "extra"):
            d[k] = _unj(d[k])
        return d

    def rows(self, run_id: int) -> list[dict]:
        return [json.loads(t[0]) for t in self._all("SELECT data FROM rows WHERE run_id = ? ORDER BY id",
                                                     (int(run_id),))]

    def events(self, run_id: int) -> list[dict]:
        return [{"kind": k, **json.loads(d)} for k, d in
                self._all("SELECT kind, data FROM events WHERE run_id = ? ORDER BY id", (int(run_id),))]

    def run_doc(self, run_id: int) -> dict:
        """The run as a results document (the shape of ``results.json``)."""
        from .report import SCHEMA
        run = self.get_run(run_id)
        extra = run.get("extra") or {}
        doc = {"schema": extra.get("schema") or SCHEMA, "created": run["created"], "command": run["command"],
               "suite": run["suite"], "machine": run["machine"] or {}, "ceilings": run["ceilings"],
               "vendor_same_shape": run["vendor"] or {}, "timing": run["timing"] or {},
               "rows": self.rows(run_id)}
        for k, v in extra.items():
            doc.setdefault(k, v)
        if run["state"] == "running":
            doc["interrupted"] = doc.get("interrupted") or "unfinished in the store (killed, or still running)"
        doc["store_run"] = {k: run[k] for k in ("id", "uid", "kind", "state", "folder")}
        return doc


def open_store(url: str | None = None, *, create: bool = True) -> Store:
    return Store(url, create=create)


# -- old run folders ---------------------------------------------------------------------------
def folder_doc(path: Path | str) -> tuple[dict, str]:
    """(results document, uid) of one run folder: its ``results.json`` where there is one, else
    its ``run.json`` and ``rows.jsonl`` (a run killed before its files were written). The uid is the
    one the run recorded in ``run.json`` (``store_uid``) when it wrote a store itself, else a digest
    of the folder's results, so that importing a folder twice finds the same run."""
    p = Path(path)
    if p.is_file() and p.name in ("results.json", "run.json"):
        p = p.parent
    if not p.is_dir():
        raise StoreError(f"run {path}: no such run folder")
    meta = {}
    if (p / "run.json").is_file():
        try:
            meta = json.loads((p / "run.json").read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise StoreError(f"run {path}: unreadable run.json ({e})") from None
    if (p / "results.json").is_file():
        raw = (p / "results.json").read_bytes()
        try:
            doc = json.loads(raw)
        except json.JSONDecodeError as e:
            raise StoreError(f"run {path}: results.json is not JSON ({e})") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
            raise StoreError(f"run {path}: results.json holds no rows (not a harness results file)")
        digest = hashlib.sha256(raw).hexdigest()[:32]
    elif meta and (p / "rows.jsonl").is_file():
        from .rows_file import read_rows
        rows, events = read_rows(p / "rows.jsonl")
        doc = {k: meta.get(k) for k in ("schema", "created", "command", "machine")}
        doc["rows"] = rows
        doc["ceilings"] = next((e["ceilings"] for e in events if e.get("_event") == "ceilings"), None)
        doc["vendor_same_shape"] = {e["case"]: e["data"] for e in events if e.get("_event") == "vendor"}
        doc["interrupted"] = "no results.json: the run stopped before writing its files"
        digest = hashlib.sha256((p / "rows.jsonl").read_bytes() + (p / "run.json").read_bytes()).hexdigest()[:32]
    else:
        raise StoreError(f"run {path}: not a run folder (no results.json, no run.json + rows.jsonl)")
    if (p / "INTERRUPTED").is_file() and not doc.get("interrupted"):
        doc["interrupted"] = (p / "INTERRUPTED").read_text().splitlines()[0]
    if meta.get("store_uid"):
        uid = meta["store_uid"]
    else:
        uid = f"sha256:{digest}"
    doc.setdefault("machine", meta.get("machine") or {})
    doc.setdefault("command", meta.get("command"))
    doc.setdefault("created", meta.get("created"))
    return doc, uid


def run_folders(paths) -> list[Path]:
    """Every run folder in or under ``paths`` (a folder with results.json, or run.json and
    rows.jsonl), in sorted order; a folder that is a run is not searched further."""
    out: list[Path] = []

    def walk(d: Path):
        if (d / "results.json").is_file() or ((d / "run.json").is_file() and (d / "rows.jsonl").is_file()):
            out.append(d)
            return
        for c in sorted(x for x in d.iterdir() if x.is_dir()):
            walk(c)

    for p in paths:
        p = Path(p)
        if not p.is_dir():
            raise StoreError(f"import: {p} is not a folder")
        walk(p)
    return out


def import_folder(store: Store, path: Path | str) -> tuple[int, int, bool]:
    """Import one run folder: (run id, rows, new?). Importing it again changes nothing."""
    doc, uid = folder_doc(path)
    existed = store.run_id_for_uid(uid)
    run_id = store.begin_run(doc, kind=_kind_of(doc), uid=uid, folder=str(Path(path)))
    store.finish_run(run_id, doc)
    n = int(store._one("SELECT COUNT(*) FROM rows WHERE run_id = ?", (run_id,))[0])
    return run_id, n, existed is None


def _kind_of(doc: dict) -> str:
    cmd = doc.get("command") or ""
    m = re.search(r"harness\s+(\w+)", cmd)
    return m.group(1) if m else "compare"


# -- resolving RUN arguments -------------------------------------------------------------------
def resolve(arg: str, store_url: str | None) -> dict:
    """A RUN argument (a run id from ``runs``, or a run folder) as a results document; a folder is
    read directly (it need not be imported). ``doc["store_run"]["label"]`` names it."""
    s = str(arg).strip()
    if re.fullmatch(r"\d+", s):
        st = open_store(store_url, create=False)
        try:
            doc = st.run_doc(int(s))
        finally:
            st.close()
        doc["store_run"]["label"] = f"run {s}"
        return doc
    p = Path(s)
    if p.exists():
        doc, uid = folder_doc(p)
        doc["store_run"] = {"id": None, "uid": uid, "kind": _kind_of(doc), "folder": str(p),
                            "state": "interrupted" if doc.get("interrupted") else "done", "label": str(p)}
        return doc
    raise StoreError(f"run {s!r}: not a run id (see python -m harness runs) nor a run folder")


# -- recording a live run ----------------------------------------------------------------------
class Recorder:
    """What a running command writes into the store; a store that fails mid-run is reported once
    and the run goes on (its files are still written)."""

    def __init__(self, store: "Store | str | None", meta: dict, kind: str, uid: str | None = None,
                 folder: str | None = None):
        self._own = not isinstance(store, Store)
        self.store = open_store(store) if self._own else store
        self.run_id = self.store.begin_run(meta, kind=kind, uid=uid, folder=folder)
        self.broken: str | None = None

    def _safe(self, fn, *a):
        if self.broken is not None:
            return
        try:
            fn(*a)
        except Exception as e:  # keep the run going: the folder still has every row
            import sys
            self.broken = f"{type(e).__name__}: {e}"
            print(f"warning: the results store {self.store.where} failed ({self.broken}); "
                  f"the run goes on, its folder keeps every row", file=sys.stderr)

    def on_event(self, ev: dict) -> None:
        """A runner event: a finished row is written at once."""
        if ev.get("event") == "row" and not ev["row"].get("pending_timing"):
            self.row(ev["row"])

    def row(self, row: dict) -> None:
        self._safe(self.store.add_row, self.run_id, row)

    def event(self, kind: str, data: dict) -> None:
        self._safe(self.store.add_event, self.run_id, kind, data)

    def finish(self, doc: dict, state: str | None = None) -> None:
        self._safe(self.store.finish_run, self.run_id, doc, state)

    def close(self) -> None:
        if self._own:
            self.store.close()


def verify_recorder(args, argv) -> "Recorder":
    """The store run of a ``verify`` command (opened before anything runs: a bad --store is found
    first)."""
    import shlex
    from .machine import machine_info
    meta = {"created": _now(), "command": "python -m harness " + " ".join(shlex.quote(a) for a in argv),
            "suite": getattr(args, "suite", None), "machine": machine_info()}
    return Recorder(getattr(args, "store", None), meta, kind="verify")

