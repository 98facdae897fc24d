"""The data dir as a place to put and get files: a local folder or an S3-compatible bucket prefix.

``DataRoot.open("/srv/wattline")`` or ``DataRoot.open("s3://bucket/prefix")`` gives the same small
API over *keys*, POSIX paths relative to the root (``power/date=2026-12-01/host=h0/x.parquet``).
Local roots use the file system directly, exactly as wattline always did; S3 roots use
``pyarrow.fs.S3FileSystem`` (Arrow's C++ client: nothing else to install).

S3 configuration comes only from the standard AWS environment, never from files in the repo:
the endpoint from ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` (unset: AWS itself), the region
from ``AWS_REGION`` or ``AWS_DEFAULT_REGION``, and credentials from the AWS default chain
(``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``, ``AWS_PROFILE`` and
``~/.aws/``, or the instance's role).

What is atomic (a reader sees the old file or the new one, never a part):

* local: a write goes to a temporary name in the target folder (``TMP_PREFIX``), is fsynced,
  renamed over the final name, and the folder is fsynced; :meth:`DataRoot.move` is a rename.
* S3: a write uploads a *complete* local file under the final key in one call into Arrow's C++
  (``pyarrow.fs.copy_files``). S3 makes a PUT or multipart upload visible only when it
  completes, so a writer killed mid-upload leaves no object (and no temporary key to clean up;
  an incomplete multipart upload stays invisible, billed until the bucket's
  ``AbortIncompleteMultipartUpload`` lifecycle rule removes it). wattline never writes an S3
  stream piece by piece from Python: Arrow completes an unfinished output stream when it is
  destroyed, even after an exception, which would publish a partial object.
  :meth:`DataRoot.move` is a server-side copy, then a delete: a crash between the two leaves
  both copies (callers must tolerate that, as quarantine does by its content checks).
  Deleting the last object of a "folder" leaves a zero-byte ``folder/`` marker (Arrow keeps the
  parent directory); listings ignore it.

Symbolic links below a local root are neither read nor written through (the root itself may be
one): :meth:`DataRoot.list` leaves out what is reached through a link, and a write whose folder or
file is a link raises :class:`LinkedPath`, an ``OSError`` naming it. A link to another folder would
otherwise have wattline write, move or rewrite files outside the data dir.

Computing happens on local files: :meth:`DataRoot.stage` downloads keys to a working copy (a
no-op on a local root), :meth:`DataRoot.upload` publishes a local result, and
:meth:`DataRoot.mirror` keeps a local copy of a prefix (e.g. ``derived/`` for ad-hoc SQL) in step.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from collectors import atomic
from collectors.atomic import TMP_PREFIX
from collectors.settings import DEFAULT_DATA_DIR, load

S3_SCHEME = "s3://"
STAGE_THREADS = 8


def is_s3_url(value: object) -> bool:
    return isinstance(value, str) and value.startswith(S3_SCHEME)


def resolve_data_root(value: str | os.PathLike | None = None) -> Path | str:
    """The data dir as the CLI takes it: an ``s3://bucket/prefix`` URL kept as a string, anything
    else an absolute Path (explicit value, else $WATTLINE_DATA_DIR, else ./data)."""
    raw = value or load().data_dir or DEFAULT_DATA_DIR
    if is_s3_url(str(raw)):
        return S3Root(str(raw)).url
    return Path(raw).expanduser().resolve()


@dataclass(frozen=True)
class FileStat:
    key: str
    size: int
    mtime_ns: int


@dataclass
class MirrorResult:
    downloaded: int = 0
    deleted: int = 0
    unchanged: int = 0
    bytes: int = 0


def _is_tmp(key: str) -> bool:
    return any(part.startswith(TMP_PREFIX) for part in key.split("/"))


def _join(*parts: str) -> str:
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


def _literal_prefix(pattern: str) -> str:
    """The folders of a glob before its first wildcard: 'power/date=*/x' → 'power'."""
    literal = []
    for part in pattern.split("/")[:-1]:
        if any(c in part for c in "*?["):
            break
        literal.append(part)
    return "/".join(literal)


def _matches(key: str, pattern: str) -> bool:
    """Glob match segment by segment: '*' never crosses '/' (as in pathlib and DuckDB)."""
    parts, pats = key.split("/"), pattern.split("/")
    return len(parts) == len(pats) and all(fnmatch.fnmatchcase(k, p) for k, p in zip(parts, pats, strict=False))


class LinkedPath(OSError):
    """A write below a local data dir would go through a symbolic link (its folder or file is one)."""


def link_below(root: Path | str, path: Path | str) -> Path | None:
    """The first folder or file of ``path`` strictly below ``root`` that is a symbolic link (None
    when none is, or ``path`` is not below ``root``); one ``lstat`` per level."""
    try:
        parts = Path(path).relative_to(root).parts
    except ValueError:
        return None
    here = Path(root)
    for part in parts:
        here = here / part
        if here.is_symlink():
            return here
    return None


def refuse_links(root: Path | str, path: Path | str) -> Path:
    """``path``, or :class:`LinkedPath` when reaching it below ``root`` goes through a symbolic link."""
    link = link_below(root, path)
    if link is not None:
        raise LinkedPath(
            f"{link} is a symbolic link (to {os.readlink(link)}): wattline does not write through links "
            f"inside the data dir {root} (make the data dir itself the link, or replace the link by a folder)"
        )
    return Path(path)


def walk_matches(root: Path | str, pattern: str, looked: Callable[[str], None] | None = None) -> tuple[list[Path], list[Path]]:
    """What a glob like ``power/date=*/host=*/*.parquet`` matches below ``root`` without following
    a symbolic link: (the regular files, the links met where the pattern would have gone through
    them or taken them). ``*`` never crosses a ``/``; names starting with a dot match, as in pathlib.
    ``looked``: called with each folder the walk lists (before listing it) and each fixed name it
    looks up, whose changes are what can change the answer."""
    segments = pattern.strip("/").split("/")
    files: list[Path] = []
    links: list[Path] = []

    def visit(folder: str, depth: int) -> None:
        segment, last = segments[depth], depth == len(segments) - 1
        if any(c in segment for c in "*?["):
            if looked is not None:
                looked(folder)
            try:
                with os.scandir(folder) as it:
                    names = sorted(e.name for e in it if fnmatch.fnmatchcase(e.name, segment))
            except (FileNotFoundError, NotADirectoryError, PermissionError):
                return
        else:
            names = [segment]
            if looked is not None:
                looked(os.path.join(folder, segment))
        for name in names:
            path = os.path.join(folder, name)
            try:
                mode = os.lstat(path).st_mode
            except (FileNotFoundError, NotADirectoryError):
                continue
            if stat.S_ISLNK(mode):
                links.append(Path(path))
            elif last and stat.S_ISREG(mode):
                files.append(Path(path))
            elif not last and stat.S_ISDIR(mode):
                visit(path, depth + 1)

    visit(os.fspath(root), 0)
    return files, links


def _atomic_local_write(path: Path, fill: Callable[[object], None]) -> Path:
    """The local write protocol: temporary name in the folder, fsync, rename, fsync the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f"{TMP_PREFIX}{path.name}.{os.getpid()}.{os.urandom(4).hex()}"
    try:
        with open(tmp, "wb") as fh:
            fill(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        atomic.fsync_dir(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


class DataRoot:
    """A local folder or an S3 prefix; see the module docstring. Create with :meth:`open`."""

    url: str
    """The root as a user writes it: a local path, or ``s3://bucket/prefix``."""
    is_local: bool

    @staticmethod
    def open(value: str | os.PathLike | DataRoot) -> DataRoot:
        """A local path (kept as given, relative or not) or an ``s3://bucket[/prefix]`` URL."""
        if isinstance(value, DataRoot):
            return value
        text = os.fspath(value)
        return S3Root(text) if is_s3_url(text) else LocalRoot(Path(value))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    # --- implemented by both kinds of root

    def location(self, key: str) -> Path | str:
        """Where a key is, for messages and return values: a Path locally, an ``s3://`` URL on S3."""
        raise NotImplementedError

    def list(self, pattern: str) -> list[str]:
        """Keys of the files matching a glob like ``power/date=*/host=*/*.parquet``, sorted;
        ``*`` never crosses a ``/``; temporary files of writers (``TMP_PREFIX``) are never listed."""
        return [st.key for st in self.list_stats(pattern)]

    def list_stats(self, pattern: str) -> list[FileStat]:
        """:meth:`list` with each file's size and mtime (on S3 from the same listing requests)."""
        raise NotImplementedError

    def exists(self, key: str) -> bool:
        raise NotImplementedError

    def stat(self, key: str) -> FileStat:
        """Size and modification time (ns; whole seconds on S3); FileNotFoundError if absent."""
        raise NotImplementedError

    def read_bytes(self, key: str) -> bytes:
        raise NotImplementedError

    def read_parquet(self, keys: str | Sequence[str], columns: list[str] | None = None,
                     schema: pa.Schema | None = None) -> pa.Table:
        """One file's rows, or several files' rows in order (the first file's schema, or ``schema``:
        a column a file lacks is read as NULL)."""
        keys = [keys] if isinstance(keys, str) else list(keys)
        paths = [self._fs_path(k) for k in keys]
        return pads.dataset(paths, schema=schema, filesystem=self._fs(), format="parquet").to_table(columns=columns)

    def read_schema(self, key: str) -> pa.Schema:
        """The Parquet footer's schema, with its key-value metadata."""
        with self._fs().open_input_file(self._fs_path(key)) as fh:
            return pq.read_schema(fh)

    def write_parquet(self, key: str, table: pa.Table, row_group_size: int = 1_000_000) -> Path | str:
        """Write ``table`` (wattline's Parquet layout) so that ``key`` is absent, old or complete."""
        raise NotImplementedError

    def write_bytes(self, key: str, data: bytes) -> Path | str:
        raise NotImplementedError

    def upload(self, local_file: str | os.PathLike, key: str) -> Path | str:
        """Publish a local file under ``key``, atomically."""
        raise NotImplementedError

    def delete(self, key: str, missing_ok: bool = True) -> None:
        raise NotImplementedError

    def move(self, src: str, dst: str) -> Path | str:
        raise NotImplementedError

    def stage(self, keys: Iterable[str], local_dir: str | os.PathLike) -> list[Path]:
        """Local files holding ``keys``' content, in order: on S3 downloaded to
        ``local_dir/<key>`` (skipped when already there with the same size and mtime); on a
        local root the files themselves (nothing is copied)."""
        raise NotImplementedError

    def state_dir(self) -> Path:
        """Local folder for locks and checkpoints: ``<data-dir>/state`` locally; for S3
        ``$WATTLINE_STATE_DIR``, else ``${XDG_STATE_HOME:-~/.local/state}/wattline/s3/<bucket>/<prefix>``."""
        raise NotImplementedError

    def _fs(self) -> pafs.FileSystem:
        raise NotImplementedError

    def _fs_path(self, key: str) -> str:
        raise NotImplementedError

    def _scan(self, prefix: str) -> list[FileStat]:
        """Every file under a prefix (recursive), temporary files left out."""
        raise NotImplementedError

    def _download(self, st: FileStat, dest: Path) -> None:
        """Copy one file to ``dest`` atomically, with the source's mtime."""
        tmp = dest.parent / f"{TMP_PREFIX}{dest.name}.{os.getpid()}.{os.urandom(4).hex()}"
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            pafs.copy_files(self._fs_path(st.key), str(tmp.absolute()), source_filesystem=self._fs(),
                            destination_filesystem=pafs.LocalFileSystem(), use_threads=False)
            os.utime(tmp, ns=(st.mtime_ns, st.mtime_ns))
            os.replace(tmp, dest)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    # --- shared

    def mirror(self, prefix: str, local_dir: str | os.PathLike) -> MirrorResult:
        """Make ``local_dir/<prefix>`` a copy of the files under ``prefix``: download what is new
        or changed (size or mtime differs), delete local files that are gone from the root.
        Each file is replaced atomically, so a reader of the copy never sees a partial file."""
        local_dir = Path(local_dir)
        prefix = prefix.strip("/")
        result = MirrorResult()
        if self.is_local and (self.location(prefix)).absolute() == (local_dir / prefix).absolute():
            result.unchanged = len(self._scan(prefix))
            return result
        remote = {st.key: st for st in self._scan(prefix)}
        todo = [st for st in remote.values() if not _up_to_date(local_dir / st.key, st)]
        result.unchanged = len(remote) - len(todo)
        self._fetch(todo, local_dir)
        result.downloaded = len(todo)
        result.bytes = sum(st.size for st in todo)
        base = local_dir / prefix if prefix else local_dir
        if base.is_dir():
            for path in sorted(base.rglob("*"), reverse=True):
                key = path.relative_to(local_dir).as_posix()
                if path.is_file() and key not in remote and not (_is_tmp(key) and _age_s(path) < 3600):
                    path.unlink()  # (another mirror's download in flight is left alone)
                    result.deleted += 1
                elif path.is_dir() and not any(path.iterdir()):
                    path.rmdir()
        return result

    def _fetch(self, stats: list[FileStat], local_dir: Path) -> None:
        if len(stats) <= 1:
            for st in stats:
                self._download(st, local_dir / st.key)
            return
        with ThreadPoolExecutor(max_workers=min(STAGE_THREADS, len(stats))) as pool:
            list(pool.map(lambda st: self._download(st, local_dir / st.key), stats))


def _age_s(path: Path) -> float:
    return time.time() - path.stat().st_mtime


def _up_to_date(path: Path, st: FileStat) -> bool:
    try:
        local = path.stat()
    except FileNotFoundError:
        return False
    return local.st_size == st.size and local.st_mtime_ns == st.mtime_ns


class LocalRoot(DataRoot):
    is_local = True

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.url = str(self.path)

    def location(self, key: str) -> Path:
        return self.path / key if key else self.path

    def list_stats(self, pattern: str) -> list[FileStat]:
        out = []
        for p in walk_matches(self.path, pattern)[0]:  # never through a link
            key = p.relative_to(self.path).as_posix()
            if not _is_tmp(key):
                with contextlib.suppress(FileNotFoundError):  # removed since it was listed
                    st = p.stat()
                    out.append(FileStat(key, st.st_size, st.st_mtime_ns))
        return sorted(out, key=lambda s: s.key)

    def exists(self, key: str) -> bool:
        return self.location(key).is_file()

    def stat(self, key: str) -> FileStat:
        st = self.location(key).stat()
        return FileStat(key, st.st_size, st.st_mtime_ns)

    def read_bytes(self, key: str) -> bytes:
        return self.location(key).read_bytes()

    def write_parquet(self, key: str, table: pa.Table, row_group_size: int = 1_000_000) -> Path:
        return atomic.write_parquet_atomic(table, refuse_links(self.path, self.location(key)), row_group_size)

    def write_bytes(self, key: str, data: bytes) -> Path:
        return _atomic_local_write(refuse_links(self.path, self.location(key)), lambda fh: fh.write(data))

    def upload(self, local_file: str | os.PathLike, key: str) -> Path:
        dest = refuse_links(self.path, self.location(key))
        if dest.exists() and os.path.samefile(local_file, dest):
            return dest
        with open(local_file, "rb") as src:
            return _atomic_local_write(dest, lambda fh: shutil.copyfileobj(src, fh, 1 << 20))

    def delete(self, key: str, missing_ok: bool = True) -> None:
        self.location(key).unlink(missing_ok=missing_ok)

    def move(self, src: str, dst: str) -> Path:
        source, dest = refuse_links(self.path, self.location(src)), refuse_links(self.path, self.location(dst))
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(source, dest)
        atomic.fsync_dir(dest.parent)
        if source.parent != dest.parent:
            atomic.fsync_dir(source.parent)
        return dest

    def stage(self, keys: Iterable[str], local_dir: str | os.PathLike | None = None) -> list[Path]:
        paths = [self.location(k) for k in keys]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"not found: {', '.join(missing[:5])}")
        return paths

    def state_dir(self) -> Path:
        return self.path / "state"

    def _fs(self) -> pafs.FileSystem:
        return pafs.LocalFileSystem()

    def _fs_path(self, key: str) -> str:
        return str(self.location(key).absolute())

    def _scan(self, prefix: str) -> list[FileStat]:
        base = self.location(prefix.strip("/"))
        if not base.is_dir():
            return []
        out = []
        for p in base.rglob("*"):
            key = p.relative_to(self.path).as_posix()
            if not _is_tmp(key) and p.is_file() and link_below(self.path, p) is None:
                st = p.stat()
                out.append(FileStat(key, st.st_size, st.st_mtime_ns))
        return sorted(out, key=lambda s: s.key)


class S3Root(DataRoot):
    is_local = False

    def __init__(self, url: str) -> None:
        if not is_s3_url(url):
            raise ValueError(f"not an s3:// URL: {url!r}")
        bucket, _, prefix = url[len(S3_SCHEME):].partition("/")
        if not bucket:
            raise ValueError(f"no bucket in {url!r}: expected s3://bucket/prefix")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = S3_SCHEME + _join(bucket, self.prefix)

    def location(self, key: str) -> str:
        return S3_SCHEME + _join(self.bucket, self.prefix, key)

    def _fs(self) -> pafs.S3FileSystem:
        return s3_filesystem(*_s3_settings())

    def _fs_path(self, key: str) -> str:
        return _join(self.bucket, self.prefix, key)

    def _info(self, key: str) -> pafs.FileInfo:
        return self._fs().get_file_info(self._fs_path(key))

    def list_stats(self, pattern: str) -> list[FileStat]:
        pattern = pattern.strip("/")
        return [st for st in self._scan(_literal_prefix(pattern)) if _matches(st.key, pattern)]

    def exists(self, key: str) -> bool:
        return self._info(key).type == pafs.FileType.File

    def stat(self, key: str) -> FileStat:
        info = self._info(key)
        if info.type != pafs.FileType.File:
            raise FileNotFoundError(f"{self.location(key)}: no such object")
        return FileStat(key, info.size, info.mtime_ns)

    def read_bytes(self, key: str) -> bytes:
        with self._fs().open_input_stream(self._fs_path(key)) as fh:
            return fh.read()

    def _put(self, local_file: str | os.PathLike, key: str) -> str:
        # One C++ call: no Python code runs between opening the upload and completing it.
        pafs.copy_files(str(Path(local_file).absolute()), self._fs_path(key),
                        source_filesystem=pafs.LocalFileSystem(), destination_filesystem=self._fs(),
                        use_threads=False)
        return self.location(key)

    def write_parquet(self, key: str, table: pa.Table, row_group_size: int = 1_000_000) -> str:
        with tempfile.TemporaryDirectory(prefix="wattline-put-") as tmp:
            local = Path(tmp) / "part.parquet"
            with open(local, "wb") as fh:
                atomic.write_parquet_to(table, fh, row_group_size)
            return self._put(local, key)

    def write_bytes(self, key: str, data: bytes) -> str:
        with tempfile.TemporaryDirectory(prefix="wattline-put-") as tmp:
            local = Path(tmp) / "blob"
            local.write_bytes(data)
            return self._put(local, key)

    def upload(self, local_file: str | os.PathLike, key: str) -> str:
        return self._put(local_file, key)

    def delete(self, key: str, missing_ok: bool = True) -> None:
        try:
            self._fs().delete_file(self._fs_path(key))
        except FileNotFoundError:
            if not missing_ok:
                raise

    def move(self, src: str, dst: str) -> str:
        self._fs().copy_file(self._fs_path(src), self._fs_path(dst))
        self._fs().delete_file(self._fs_path(src))
        return self.location(dst)

    def stage(self, keys: Iterable[str], local_dir: str | os.PathLike) -> list[Path]:
        keys = list(keys)
        local_dir = Path(local_dir)
        with ThreadPoolExecutor(max_workers=max(1, min(STAGE_THREADS, len(keys)))) as pool:
            stats = list(pool.map(self.stat, keys))  # one HEAD each, in parallel
        self._fetch([st for st in stats if not _up_to_date(local_dir / st.key, st)], local_dir)
        return [local_dir / k for k in keys]

    def state_dir(self) -> Path:
        state_dir = load().state_dir
        if state_dir:
            return Path(state_dir).expanduser()
        base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
        return base / "wattline" / "s3" / self.bucket / (self.prefix or "_root")

    def _scan(self, prefix: str) -> list[FileStat]:
        base = self._fs_path(prefix)
        strip = len(self._fs_path("")) + 1
        infos = self._fs().get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
        out = []
        for info in infos:
            if info.type != pafs.FileType.File:
                continue
            key = info.path[strip:]
            if not _is_tmp(key):
                out.append(FileStat(key, info.size, info.mtime_ns))
        return sorted(out, key=lambda s: s.key)


def _s3_settings() -> tuple:
    """What the client depends on, from the environment: the cache key of :func:`s3_filesystem`
    (the key id and profile only tell a changed identity apart; the client reads them itself)."""
    env = os.environ.get
    endpoint = env("AWS_ENDPOINT_URL_S3") or env("AWS_ENDPOINT_URL") or None
    region = env("AWS_REGION") or env("AWS_DEFAULT_REGION") or None
    return endpoint, region, env("AWS_ACCESS_KEY_ID"), env("AWS_PROFILE"), os.getpid()


@functools.lru_cache(maxsize=8)
def s3_filesystem(endpoint: str | None, region: str | None, _key_id, _profile, _pid: int) -> pafs.S3FileSystem:
    """One client per endpoint, region, identity and process (a client must not cross a fork).
    Credentials are left to the AWS default chain: environment variables, profile, instance role."""
    kwargs = {}
    if endpoint:
        kwargs["endpoint_override"] = endpoint  # may carry its scheme: http://127.0.0.1:9000
        if endpoint.startswith("http://"):
            kwargs["scheme"] = "http"
    if region or endpoint:
        kwargs["region"] = region or "us-east-1"  # S3-compatible servers accept the default
    return pafs.S3FileSystem(**kwargs)
