"""`wattline sql` runs its query in a worker process under a hard memory bound and a timeout.

DuckDB's memory_limit covers its buffer manager, not every allocation: one huge value or list
(``len(range(0, 600000000))``, ``repeat('x', 2e9) || ...``) reached 9 GB and ran on long past
``--timeout``, since DuckDB checks for an interrupt between chunks, not inside one function
call. So the query, and the rendering of its result (which holds it once more), run in a
child process that this one watches:

- memory: the child's address space is limited (``RLIMIT_AS``: its size when the query starts
  plus the bound), so one giant allocation fails at once with DuckDB's out-of-memory error;
  and the child's RSS plus this process's growth since the query was sent is read every 20 ms,
  the child killed when their sum is past the bound (growth by many small allocations, or into
  address space reserved before);
- time: past ``--timeout`` the child gets SIGUSR1 (its handler calls ``con.interrupt()``, the
  Ctrl-C path of :func:`pipeline.readonly.execute`), and SIGKILL :data:`GRACE_S` later if it
  is still running: the command returns within a few seconds of its limit whatever the query;
- Ctrl-C reaches only this process (the child has its own session) and is forwarded the same
  way; the child ends by itself when this process dies (it watches its stdin for EOF).

The child writes the formatted result to a file, and this process copies it out only when the
query succeeded: a stopped query prints one ``error:`` line and nothing else.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

POLL_S = 0.02
GRACE_S = 2.0
"""After asking the child to stop (timeout, Ctrl-C): how long it may take before it is killed."""
HEADROOM_MIB = 512
"""Of the process bound, what is left beside DuckDB's memory_limit: Python, the Arrow result, the
formatted output, and the allocations DuckDB does not count."""

_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?)\s*([kmgt]?i?b?)\s*$", re.IGNORECASE)
_UNITS = {"": 2**20, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def parse_size(text: str) -> int:
    """Bytes in a size as DuckDB writes them (``2GB`` = 2·10⁹, ``2GiB`` = 2·2³⁰; a bare number is MiB)."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(f"bad size {text!r}: expected e.g. 2GiB, 1500MB or 512 (MiB)")
    return int(float(match.group(1)) * _UNITS[unit])


def default_bound_bytes(duckdb_memory: str | None) -> int:
    """The pipeline's DuckDB memory bound (``duckdb_memory``: the setting, WATTLINE_DUCKDB_MEMORY;
    None: a quarter of RAM up to 2 GiB) plus :data:`HEADROOM_MIB` for the rest of the process."""
    from pipeline.warehouse import duckdb_config

    return parse_size(duckdb_config(duckdb_memory)["memory_limit"]) + HEADROOM_MIB * 2**20


def duckdb_limit(bound_bytes: int) -> str:
    """DuckDB's memory_limit under a process bound: the bound less the headroom (at most half of it)."""
    return f"{(bound_bytes - min(HEADROOM_MIB * 2**20, bound_bytes // 2)) // 2**20}MiB"


class QueryStopped(Exception):
    """The query was stopped or failed; ``kind``: "user" (its message is the user's), "memory",
    "timeout", "interrupt"."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclass
class Result:
    path: Path  # the formatted result, in the caller's work dir
    catalog_problem: str | None  # why the catalog file was not used (views built in memory)
    format_note: str | None  # columns written as text (sqlout.for_format)


def mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


def run(data_dir: Path, query: str, fmt: str, max_rows: int, timeout_s: float, bound_bytes: int,
        workdir: Path, duckdb_memory: str | None = None, duckdb_threads: int | None = None) -> Result:
    """Run ``query`` in a child process, the child and this one's growth under ``bound_bytes`` of RSS, and ``timeout_s`` seconds
    (counted from when the query starts, after the catalog is open), its result formatted as
    ``fmt`` into a file under ``workdir``; DuckDB's memory_limit is ``duckdb_memory`` and its threads
    ``duckdb_threads`` (None: the defaults; the child gets them in its arguments). Raises :class:`QueryStopped`."""
    out, status = workdir / f"result.{fmt}", workdir / "status.json"
    spec = {"data_dir": str(data_dir), "query": query, "format": fmt, "max_rows": max_rows,
            "out": str(out), "status": str(status), "bound_bytes": bound_bytes, "duckdb_memory": duckdb_memory,
            "duckdb_threads": duckdb_threads}
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.sqlworker", json.dumps(spec)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
    stop: list[str] = []
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, lambda *_: stop.append("interrupt")) if in_main else None
    started = kill_at = None
    peak = 0
    # The bound is the command's: the child plus what this process grows by while it waits (its
    # own start-up size is left out, so a host process that embeds the command, a test runner or a
    # notebook, does not spend the bound on what it held before).
    own_at_start = _rss(os.getpid())
    try:
        while proc.poll() is None:
            ready, _, _ = select.select([proc.stdout], [], [], POLL_S)
            if ready and proc.stdout is not None and proc.stdout.read1(64) and started is None:  # type: ignore[attr-defined]
                started = time.monotonic()  # the child says: the query starts now
            rss = _rss(proc.pid) + max(0, _rss(os.getpid()) - own_at_start)
            peak = max(peak, rss)
            if rss > bound_bytes:
                stop.append("memory")
                proc.kill()
                break
            if not stop and started is not None and time.monotonic() - started > timeout_s:
                stop.append("timeout")
            if stop and kill_at is None:
                proc.send_signal(signal.SIGUSR1)
                kill_at = time.monotonic() + GRACE_S
            if kill_at is not None and time.monotonic() > kill_at:
                proc.kill()
                break
        proc.wait()
    finally:
        if in_main:
            signal.signal(signal.SIGINT, previous)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
    reported = _read_status(status)
    why = stop[0] if stop else None
    if why == "memory" or (reported or {}).get("kind") == "memory":
        detail = (reported or {}).get("message")
        raise QueryStopped("memory", f"query stopped: over the memory bound of {mib(bound_bytes)} "
                           "(--memory-limit SIZE to allow more)" + (f"; DuckDB: {detail}" if detail else ""))
    if why == "timeout":
        raise QueryStopped("timeout", f"query exceeded {timeout_s:g} s and was stopped (--timeout SECONDS to allow more)")
    if why == "interrupt":
        raise QueryStopped("interrupt", "interrupted (Ctrl-C): the query was stopped")
    if reported is None:
        raise QueryStopped("user", f"query stopped: its process ended with {_exit_text(proc.returncode)} "
                           f"(peak {mib(peak)} RSS)")
    if reported["kind"] == "ok":
        return Result(out, reported.get("catalog_problem"), reported.get("format_note"))
    if reported["kind"] == "bug":
        raise RuntimeError(f"wattline sql worker failed:\n{reported['message']}")
    raise QueryStopped(reported["kind"], reported["message"])


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        import psutil  # not Linux

        try:
            return int(psutil.Process(pid).memory_info().rss)
        except psutil.Error:
            return 0


def _read_status(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def temporary_workdir() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="wattline-sql-")


def copy_out(path: Path, target) -> None:
    """The result file into a binary stream, 1 MiB at a time."""
    with path.open("rb") as src:
        shutil.copyfileobj(src, target, 2**20)


# The child.

def _address_space_limit(bound_bytes: int) -> None:
    """Limit the address space to its size now plus the bound: one allocation past it fails."""
    import resource

    try:
        with open("/proc/self/statm", "rb") as f:
            size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = size + bound_bytes
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        if soft == resource.RLIM_INFINITY or limit < soft:
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (OSError, ValueError, IndexError):
        pass  # not Linux: the parent's RSS watch alone


def _worker(spec: dict) -> dict:
    from pipeline import readonly, sqlout

    bound = spec["bound_bytes"]
    readonly.set_limits(spec["duckdb_memory"], spec.get("duckdb_threads"))
    limited: list[bool] = []

    def on_start() -> None:
        if not limited:
            limited.append(True)
            _address_space_limit(bound)
        sys.stdout.buffer.write(b"q")
        sys.stdout.flush()

    notes: list[str] = []
    try:
        table = readonly.run_query(Path(spec["data_dir"]), spec["query"], None, notes,
                                   stop_signal=signal.SIGUSR1, on_start=on_start)
        try:
            note = sqlout.write(table, spec["format"], Path(spec["out"]), spec["max_rows"])
        except OSError as exc:  # e.g. a full temporary folder
            return {"kind": "user", "message": f"cannot write the result to {spec['out']}: {exc.strerror or exc}"}
    except readonly.QueryOutOfMemory as exc:
        return {"kind": "memory", "message": str(exc)}
    except MemoryError:
        return {"kind": "memory", "message": None}
    except readonly.QueryInterrupted as exc:
        return {"kind": "interrupt", "message": str(exc)}
    except readonly.ReadOnlyError as exc:
        return {"kind": "user", "message": str(exc)}
    except OSError as exc:  # e.g. no catalog yet on a read-only data dir
        return {"kind": "user", "message": f"cannot query {spec['data_dir']}: {exc}"}
    return {"kind": "ok", "catalog_problem": notes[0] if notes else None, "format_note": note}


def _main() -> None:
    # Stop when the parent is gone (its end of our stdin closes), whatever the query is doing.
    threading.Thread(target=lambda: (sys.stdin.buffer.read(), os._exit(3)), daemon=True).start()
    spec = json.loads(sys.argv[1])
    try:
        status = _worker(spec)
    except BaseException:
        status = {"kind": "bug", "message": traceback.format_exc()}
    Path(spec["status"]).write_text(json.dumps(status))
    sys.stdout.flush()
    os._exit(0)  # no interpreter teardown: DuckDB's threads and a large result are freed by the OS


if __name__ == "__main__":
    _main()
