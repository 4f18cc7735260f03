"""Backup and restore of a SQLite database: its file, its tokens file and its signing key, in one archive.

A backup is a tar archive (gzip-compressed with `gzip`) whose first member, `manifest.json`, names the
other members with their size and SHA-256 and holds the figures checked on the copy: builds per account,
logs and tokens. The database is copied with SQLite's online backup API in one step, which reads one
snapshot while the server goes on writing (a write-ahead log lets readers and a writer work at once); a
copy in several steps would start over at every write of the server and, under steady writes, never end.

Nothing is half-written: the archive is made under a temporary name beside its destination and renamed
once it is whole and read back; a restore checks every member before it renames them into place.
"""

from __future__ import annotations

import contextlib
import gzip as gzip_module
import hashlib
import os
import shutil
import sqlite3
import tarfile
import tempfile
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import msgspec

from buildreport.store.errors import DatabaseError
from buildreport.store.sqlite.schema import APPLICATION_ID, AUTH_SUFFIX, auth_path, connect_existing, rw_uri
from buildreport.store.sqlite.writelock import lock_path

FORMAT = "buildreport-backup"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
DATABASE, TOKENS, SECRET = "database.sqlite", "tokens.sqlite", "signing.key"
_CHUNK = 1024 * 1024


class Member(msgspec.Struct):
    name: str
    size: int
    sha256: str


class Manifest(msgspec.Struct):
    """What an archive holds and the figures of its database, as checked when it was made."""

    format: str
    version: int
    created_at: str
    schema_version: int
    builds: dict[str, int]  # per account name
    logs: int
    tokens: int
    members: list[Member]


class Written(msgspec.Struct):
    path: str
    bytes: int
    seconds: float
    manifest: Manifest


def _hash(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _figures(db: Path, tokens: Path) -> dict[str, Any]:
    """Integrity of both copies and the figures a manifest records; DatabaseError for a copy that is damaged
    or whose kept totals disagree with its builds (a torn copy)."""
    conn = sqlite3.connect(db)  # a private copy; read only, but free to make its own journals
    try:
        for name in (DATABASE, TOKENS):
            if name == TOKENS:
                conn.execute("ATTACH DATABASE ? AS auth", (str(tokens),))
            schema = "auth" if name == TOKENS else "main"
            (result,) = conn.execute(f"PRAGMA {schema}.integrity_check(1)").fetchone()
            if result != "ok":
                raise DatabaseError(f"the copy of the {name.split('.')[0]} fails its integrity check: {result}")
        builds = dict(conn.execute(
            "SELECT a.name, count(b.build_id) FROM accounts a LEFT JOIN builds b ON b.account_id = a.account_id"
            " GROUP BY a.name ORDER BY a.name"
        ).fetchall())
        kept = dict(conn.execute(
            "SELECT a.name, coalesce(sum(t.builds), 0) FROM accounts a"
            " LEFT JOIN daily_totals t ON t.account_id = a.account_id GROUP BY a.name ORDER BY a.name"
        ).fetchall())
        if kept != builds:
            raise DatabaseError("the copy's kept totals disagree with its builds")
        (logs,) = conn.execute("SELECT count(*) FROM build_logs").fetchone()
        (token_count,) = conn.execute("SELECT count(*) FROM auth.tokens").fetchone()
        (version,) = conn.execute("PRAGMA main.user_version").fetchone()
        return {"builds": builds, "logs": logs, "tokens": token_count, "schema_version": version}
    except sqlite3.DatabaseError as exc:
        raise DatabaseError(f"the copy cannot be read: {exc}") from exc
    finally:
        conn.close()


def _copy_live(source: Path, target: Path) -> None:
    """Copy a live database file with the online backup API, in one step (one snapshot)."""
    src = connect_existing(source)
    dst = sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()


@contextlib.contextmanager
def _scratch(beside: Path) -> Iterator[Path]:
    """A private folder beside `beside` (on its file system, so that renames are atomic), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix=f".{beside.name}.", dir=beside.parent))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _check_source(db: Path) -> None:
    if not db.is_file():
        raise DatabaseError(f"{db} does not exist" if not db.exists() else f"{db} is not a database file")
    if not auth_path(db).is_file():
        raise DatabaseError(f"{auth_path(db)} (the tokens file of {db}) does not exist")
    conn = connect_existing(db)
    try:
        (app_id,) = conn.execute("PRAGMA application_id").fetchone()
    except sqlite3.DatabaseError as exc:
        raise DatabaseError(f"{db} is not a buildreport database") from exc
    finally:
        conn.close()
    if app_id != APPLICATION_ID:
        raise DatabaseError(f"{db} is not a buildreport database")


def backup(db: Path, to: Path, *, gzip: bool = False) -> Written:
    """Copy the database at `db` with its tokens and signing key into the archive `to`, checked."""
    started = time.perf_counter()
    _check_source(db)
    if to.is_dir():
        raise DatabaseError(f"{to} is a directory; name the backup file")
    if to.resolve() in {p.resolve() for p in (db, auth_path(db), Path(str(db) + ".secret"))}:
        raise DatabaseError(f"{to} is a file of the database itself; write the backup elsewhere")
    if not to.parent.is_dir():
        raise DatabaseError(f"cannot write {to}: directory {to.parent} does not exist")
    with _scratch(to) as folder:
        files = {DATABASE: folder / DATABASE, TOKENS: folder / TOKENS}
        _copy_live(db, files[DATABASE])
        _copy_live(auth_path(db), files[TOKENS])
        secret = Path(str(db) + ".secret")
        if secret.is_file():
            files[SECRET] = folder / SECRET
            shutil.copyfile(secret, files[SECRET])
        figures = _figures(files[DATABASE], files[TOKENS])
        members = [Member(name, path.stat().st_size, _hash(path)) for name, path in files.items()]
        manifest = Manifest(FORMAT, FORMAT_VERSION, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                            members=members, **figures)
        partial = folder / "archive"
        _write_archive(partial, manifest, files, gzip)
        if read_manifest(partial, verify=True) != manifest:
            raise DatabaseError("the archive does not read back as written")
        os.replace(partial, to)
        _sync_folder(to.parent)
    return Written(str(to), to.stat().st_size, round(time.perf_counter() - started, 3), manifest)


def _write_archive(path: Path, manifest: Manifest, files: dict[str, Path], gzip: bool) -> None:
    with path.open("xb") as raw:
        os.fchmod(raw.fileno(), 0o600)  # it holds token digests and the signing key
        options = {"mode": "w:gz", "compresslevel": 6} if gzip else {"mode": "w"}
        with tarfile.open(fileobj=raw, **options) as archive:  # type: ignore[call-overload]
            body = msgspec.json.format(msgspec.json.encode(manifest))
            info = tarfile.TarInfo(MANIFEST)
            info.size, info.mtime, info.mode = len(body), int(time.time()), 0o600
            archive.addfile(info, _Bytes(body))
            for name, file in files.items():
                info = archive.gettarinfo(str(file), arcname=name)
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                with file.open("rb") as handle:
                    archive.addfile(info, handle)
        raw.flush()
        os.fsync(raw.fileno())


class _Bytes:
    """A readable file over bytes, for tarfile.addfile."""

    def __init__(self, data: bytes) -> None:
        self._data, self._at = data, 0

    def read(self, size: int = -1) -> bytes:
        end = len(self._data) if size < 0 else self._at + size
        chunk, self._at = self._data[self._at : end], min(end, len(self._data))
        return chunk


def _sync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _open_archive(path: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(path, mode="r:*")
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise DatabaseError(f"{path} is not a buildreport backup: {exc}") from exc


def read_manifest(path: Path, *, verify: bool = False, extract_to: Path | None = None) -> Manifest:
    """The manifest of the archive at `path`; with `verify`, every member's size and SHA-256 are checked, and
    with `extract_to` the members are written into that folder under their own names."""
    with _open_archive(path) as archive:
        try:
            first = archive.next()
            if first is None or first.name != MANIFEST:
                raise DatabaseError(f"{path} is not a buildreport backup: it does not start with {MANIFEST}")
            manifest = msgspec.json.decode(_read(archive, first).read(), type=Manifest)
            if manifest.format != FORMAT or manifest.version != FORMAT_VERSION:
                raise DatabaseError(f"{path} is not a buildreport backup of format {FORMAT} {FORMAT_VERSION}")
            if not verify and extract_to is None:
                return manifest
            expected = {member.name: member for member in manifest.members}
            if not {DATABASE, TOKENS} <= set(expected) <= {DATABASE, TOKENS, SECRET}:
                raise DatabaseError(f"{path}: its manifest names unexpected members")
            seen = set()
            while (info := archive.next()) is not None:
                member = expected.get(info.name)
                if member is None or info.name in seen:
                    raise DatabaseError(f"{path}: unexpected member {info.name!r}")
                seen.add(info.name)
                target = extract_to / member.name if extract_to is not None else None
                _check_member(path, _read(archive, info), member, target)
            if seen != set(expected):
                raise DatabaseError(f"{path} is incomplete: {', '.join(sorted(set(expected) - seen))} missing")
            return manifest
        except (tarfile.TarError, EOFError, msgspec.DecodeError, zlib.error, gzip_module.BadGzipFile) as exc:
            raise DatabaseError(f"{path} is damaged: {exc}") from exc


def _read(archive: tarfile.TarFile, info: tarfile.TarInfo) -> IO[bytes]:
    handle = archive.extractfile(info) if info.isfile() else None
    if handle is None:
        raise DatabaseError(f"member {info.name!r} is not a file")
    return handle


def _check_member(archive: Path, handle: IO[bytes], member: Member, target: Path | None) -> None:
    digest, size = hashlib.sha256(), 0
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(target.open("xb")) if target is not None else None
        if out is not None:
            os.fchmod(out.fileno(), 0o600)
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
            if out is not None:
                out.write(chunk)
        if out is not None:
            out.flush()
            os.fsync(out.fileno())
    if size != member.size or digest.hexdigest() != member.sha256:
        raise DatabaseError(f"{archive}: {member.name} does not match its checksum; the backup is damaged")


def in_use(db: Path) -> bool:
    """Whether a process has the database open (a server, an import). SQLite lets a file leave write-ahead
    logging only when no other connection has it open, so that is asked; it also waits for no lock."""
    fd = os.open(lock_path(db), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        import fcntl

        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a server's write under way holds it
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError:
            return True
    finally:
        os.close(fd)
    for path in (db, auth_path(db)):
        if not path.exists():
            continue
        conn = sqlite3.connect(rw_uri(path), uri=True, isolation_level=None, timeout=0)
        try:
            wal = conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            if wal and conn.execute("PRAGMA journal_mode = DELETE").fetchone()[0] != "delete":
                return True
            conn.execute("BEGIN EXCLUSIVE")
            conn.rollback()
        except sqlite3.OperationalError:
            return True
        except sqlite3.DatabaseError:
            continue  # not a database: nothing uses it as one
        finally:
            conn.close()
    return False


class Restored(msgspec.Struct):
    path: str
    seconds: float
    manifest: Manifest


def restore(source: Path, db: Path, *, force: bool = False) -> Restored:
    """Put the database of the archive `source` in place at `db`, checked against its manifest first."""
    started = time.perf_counter()
    if not source.is_file():
        raise DatabaseError(f"{source} does not exist" if not source.exists() else f"{source} is not a file")
    if db.is_dir():
        raise DatabaseError(f"{db} is a directory, not a database file")
    if not db.parent.is_dir():
        raise DatabaseError(f"cannot restore to {db}: directory {db.parent} does not exist")
    manifest = read_manifest(source)
    existing = db.exists() or auth_path(db).exists()
    if existing and not force:
        raise DatabaseError(f"{db} exists; give --force to replace it (stop its server first)")
    with _scratch(db) as folder:
        read_manifest(source, extract_to=folder)
        names = {member.name for member in manifest.members}
        figures = _figures(folder / DATABASE, folder / TOKENS)
        recorded = {k: getattr(manifest, k) for k in figures}
        if figures != recorded:
            raise DatabaseError(f"{source}: the restored database does not hold what its manifest records")
        if existing and in_use(db):
            raise DatabaseError(f"{db} is in use (a server or another command has it open); stop it first")
        _put_in_place(folder, db, SECRET in names)
    return Restored(str(db), round(time.perf_counter() - started, 3), manifest)


def _put_in_place(folder: Path, db: Path, has_secret: bool) -> None:
    """Rename the checked files over the database's, each rename atomic, the database itself last. The old
    files' journals go first: a log left beside the new file would be applied to it."""
    for base in (str(db), str(db) + AUTH_SUFFIX):
        for suffix in ("-wal", "-shm", "-journal"):
            Path(base + suffix).unlink(missing_ok=True)
    os.replace(folder / TOKENS, auth_path(db))
    secret = Path(str(db) + ".secret")
    if has_secret:
        os.replace(folder / SECRET, secret)
    else:
        secret.unlink(missing_ok=True)
    os.replace(folder / DATABASE, db)
    _sync_folder(db.parent)
