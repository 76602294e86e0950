"""The persistent performance database: tuned kernel parameters per device and problem.

SQLite in the per-user cache folder (``PYDNNL_PERF_DB`` overrides the path), keyed by device
signature (platform, device, driver version, compute units), kernel family and problem key.
Safe under concurrent processes (SQLite locking, short transactions, retries); a corrupt file or
one written by another schema version is set aside with a warning, never a crash.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import warnings
from pathlib import Path

SCHEMA_VERSION = 1
_lock = threading.Lock()
_instances: dict[str, "PerfDB"] = {}


def default_path() -> Path:
    env = os.environ.get("PYDNNL_PERF_DB")
    if env:
        return Path(env)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("pydnnl")) / "perfdb.sqlite"


class PerfDB:
    """``get``/``put`` of the best parameters (and their time) for a (device, family, key)."""

    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path is not None else default_path()
        self._conn: sqlite3.Connection | None = None
        self._mem: dict[tuple[str, str, str], tuple[dict, float]] = {}

    @classmethod
    def default(cls) -> "PerfDB":
        p = str(default_path())
        with _lock:
            db = _instances.get(p)
            if db is None:
                db = _instances[p] = cls(p)
            return db

    # -- connection ------------------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection | None:
        if self._conn is not None:
            return self._conn
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            return None
        for attempt in range(2):
            try:
                conn = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None,
                                       check_same_thread=False)
                conn.execute("PRAGMA busy_timeout = 30000")
                conn.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT)")
                row = conn.execute("SELECT v FROM meta WHERE k = 'schema'").fetchone()
                if row is None:
                    conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)",
                                 (str(SCHEMA_VERSION),))
                elif row[0] != str(SCHEMA_VERSION):
                    conn.close()
                    self._set_aside(f"schema version {row[0]}, expected {SCHEMA_VERSION}")
                    continue
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS perf (device TEXT, family TEXT, key TEXT, "
                    "params TEXT, ms REAL, updated REAL, PRIMARY KEY (device, family, key))")
                self._conn = conn
                return conn
            except sqlite3.DatabaseError as e:
                if attempt == 0:
                    self._set_aside(f"unreadable ({e})")
                    continue
                warnings.warn(f"pydnnl perf database {self.path} unusable ({e}); tuning results "
                              f"are kept in memory only", RuntimeWarning, stacklevel=3)
                return None
        return None

    def _set_aside(self, why: str) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        target = self.path.with_name(f"{self.path.name}.{why.split()[0]}-{stamp}-{os.getpid()}.bad")
        try:
            self.path.replace(target)
            warnings.warn(f"pydnnl perf database {self.path} is {why}; moved it to {target} and "
                          f"started a new one", RuntimeWarning, stacklevel=4)
        except OSError:
            pass

    # -- access ----------------------------------------------------------------------------------
    def get(self, device: str, family: str, key: str) -> tuple[dict, float] | None:
        k = (device, family, key)
        if k in self._mem:
            return self._mem[k]
        conn = self._connect()
        if conn is None:
            return None
        try:
            row = conn.execute("SELECT params, ms FROM perf WHERE device=? AND family=? AND key=?",
                               k).fetchone()
        except sqlite3.DatabaseError:
            return None
        if row is None:
            return None
        try:
            val = (json.loads(row[0]), float(row[1]))
        except ValueError:
            return None
        self._mem[k] = val
        return val

    def put(self, device: str, family: str, key: str, params: dict, ms: float) -> None:
        """Store ``params`` unless a faster result is already stored."""
        k = (device, family, key)
        old = self.get(device, family, key)
        if old is not None and old[1] <= ms:
            return
        self._mem[k] = (dict(params), float(ms))
        conn = self._connect()
        if conn is None:
            return
        for _ in range(20):
            try:
                conn.execute("BEGIN IMMEDIATE")
                row = conn.execute(
                    "SELECT ms FROM perf WHERE device=? AND family=? AND key=?", k).fetchone()
                if row is None or float(row[0]) > ms:
                    conn.execute("INSERT OR REPLACE INTO perf VALUES (?, ?, ?, ?, ?, ?)",
                                 (*k, json.dumps(params, sort_keys=True), float(ms), time.time()))
                conn.execute("COMMIT")
                return
            except sqlite3.OperationalError:  # locked by another writer: retry
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.OperationalError:
                    pass
                time.sleep(0.05)

    def entries(self) -> list[tuple[str, str, str, dict, float]]:
        conn = self._connect()
        if conn is None:
            return [(*k, p, ms) for k, (p, ms) in self._mem.items()]
        rows = conn.execute(
            "SELECT device, family, key, params, ms FROM perf ORDER BY device, family, key")
        return [(d, f, k, json.loads(p), ms) for d, f, k, p, ms in rows]

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
