"""Measure the collector's own CPU time and RSS: a child process, sampled from outside with /proc.

    python bench/collector_overhead.py --seconds 60 --fake-gpus 8          # CI machine, fake NVML
    python bench/collector_overhead.py --seconds 60                        # a GPU host, real NVML
    python bench/collector_overhead.py --child-replicated 8 DATA_DIR       # 8 samplers on GPU 0 (see run_replicated)

Prints one JSON object: steady-state CPU as % of one core (from t=warmup to the end, so the
one-off import of pyarrow is not counted), the same per GPU per hour in CPU-seconds, and peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a live process, from /proc (no psutil needed on a GPU host)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def proc_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class ProcessMeter:
    """Samples one child's CPU seconds and RSS every ``every_s``; call ``sample()`` from a loop."""

    def __init__(self, proc: subprocess.Popen, name: str):
        self.proc, self.name = proc, name
        self.t0 = time.monotonic()
        self.samples: list[tuple[float, float, float]] = []  # (t since start, cpu s, rss MB)

    def sample(self) -> None:
        try:
            self.samples.append((time.monotonic() - self.t0, proc_cpu_s(self.proc.pid), proc_rss_mb(self.proc.pid)))
        except (FileNotFoundError, ProcessLookupError, IndexError):
            pass

    def report(self, warmup_s: float, gpus: int) -> dict:
        steady = [s for s in self.samples if s[0] >= warmup_s] or self.samples
        (ta, ca, _), (tb, cb, _) = steady[0], steady[-1]
        pct = 100.0 * (cb - ca) / (tb - ta) if tb > ta else float("nan")
        return {
            "process": self.name,
            "window_s": round(tb - ta, 1),
            "cpu_pct_of_one_core": round(pct, 4),
            "cpu_s_per_gpu_hour": round(pct / 100 * 3600 / max(1, gpus), 2),
            "cpu_s_total_incl_startup": round(self.samples[-1][1], 3) if self.samples else None,
            "rss_peak_mb": round(max(s[2] for s in self.samples), 1) if self.samples else None,
        }


def collector_cmd(data_dir: Path, extra: list[str], python: str = sys.executable) -> list[str]:
    return [python, "-m", "collectors.nvml", "--data-dir", str(data_dir), "--host", "bench", *extra]


def replicated_collector(copies: int, data_dir: Path, gpu: int = 0):
    """The real collector at its defaults, opened, with ``copies`` samplers all reading GPU ``gpu``
    through the real NVML and writing as GPUs 0..copies-1. A one-GPU host then shows the CPU cost of
    sampling ``copies`` GPUs: every NVML call and every row is real, only the board is shared."""
    sys.path.insert(0, str(REPO))
    from collectors.nvml.daemon import Collector, CollectorConfig, _lean_memory
    from collectors.nvml.gpu_sampler import GpuSampler
    from collectors.nvml.nvml_source import GpuReader

    _lean_memory()
    c = Collector(CollectorConfig(data_dir=data_dir, host="replicated", gpus=[gpu]))
    signal.signal(signal.SIGTERM, lambda *_: c.stop.set())
    c.open()
    c.samplers[0].gpu = 0  # rows as GPUs 0..copies-1, whichever board is read
    for k in range(1, copies):
        r = GpuReader(c.nvml, gpu)
        r.reopen()
        s = GpuSampler(r, c.cfg.sampling, c.rows, c.counters)
        s.gpu = k
        c.samplers.append(s)
    return c


def run_replicated(copies: int, data_dir: Path, gpu: int = 0) -> int:
    """Child mode: :func:`replicated_collector`, run until SIGTERM."""
    return replicated_collector(copies, data_dir, gpu).run()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child-replicated":
        sys.exit(run_replicated(int(sys.argv[2]), Path(sys.argv[3])))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--warmup", type=float, default=10)
    ap.add_argument("--fake-gpus", type=int, default=0, help="use the fake NVML with this many GPUs")
    ap.add_argument("--gpus", type=int, default=None, help="GPU count for the per-GPU figure (real NVML)")
    ap.add_argument("args", nargs="*", help="extra collector options, after --")
    a = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=f"{REPO}:{os.environ.get('PYTHONPATH', '')}")
    extra = list(a.args)
    if a.fake_gpus:
        env["WATTLINE_FAKE_NVML"] = json.dumps({"gpus": a.fake_gpus})
        extra += ["--nvml-module", "tests.fakes.fake_pynvml"]
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen(collector_cmd(Path(tmp), extra), env=env, cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        meter = ProcessMeter(proc, "wattline collect")
        end = time.monotonic() + a.seconds
        while time.monotonic() < end and proc.poll() is None:
            meter.sample()
            time.sleep(1.0)
        meter.sample()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        out = meter.report(a.warmup, a.fake_gpus or a.gpus or 1)
        out.update(exit_code=proc.returncode, fake_nvml=bool(a.fake_gpus), gpus=a.fake_gpus or a.gpus or 1,
                   options=" ".join(extra), last_log=err.strip().splitlines()[-1:] if err else [])
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
