"""Cluster-level 2 s power swings of the ``paper`` fleet, next to the published 37.5 % (training) and 9 % (inference).

    python bench/paper_swings.py [--scale 1.0] [--hours 0.5] [--workdir bench/work/paper] [--out docs/img]
    python bench/paper_swings.py --training-sweep [--hours 0.1] [--out docs/img]

Simulates the fleet (``collectors.simulate.fleets.paper_fleet``: 2,048 inference GPUs as 256 endpoints of
8, a 1,024-GPU synchronous training job; ``--scale`` shrinks both) at 10 Hz for ``--hours`` from 00:00 UTC
(16:00–19:00 in the endpoints' UTC−5…−8: near their daily peak), then computes from the raw power files,
independently of the pipeline, what ``swing_stats`` defines: on the 100 ms grid of summed instantaneous
power, the largest max − min inside any 2 s window (sliding at 100 ms), as a share of the cluster's
provisioned power (6,500 W per 8-GPU host). Nothing is tuned to the published figures. Also the
inference swing of the first k endpoints for k = 1, 2, 4, … (same run), plotted against k.

``--pipeline-sweep``: the paper job (tp 8 × pp 16 × dp 8 of a 175B model, 1F1B, gradients reduced in
buckets overlapped with the last backward) with one parameter changed at a time: overlap, micro-batches,
pipeline depth, model size, fabric bandwidth, the wait's power level, host jitter (``paper-pipeline-sweep.json``).

``--training-sweep`` explains the training cluster's swing instead of hitting a number: the lock-step job
(``--scale`` applies) run by the simulator's own job model and per-GPU sampler, with the hosts' compute-time
jitter (``host_jitter_sd``) and a fixed per-host phase offset (``stage_offset_s``: pipeline stages or
data-parallel groups out of step) swept, each measured the same way (``paper-training-sweep.json``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import yaml  # noqa: E402

from collectors.contract import epoch_ns  # noqa: E402
from collectors.inventory import parse_inventory as resolve_inventory  # noqa: E402
from collectors.simulate import phases, power, simulate  # noqa: E402
from collectors.simulate.fleets import HOST_PROVISIONED_W, paper_fleet  # noqa: E402
from collectors.simulate.simulator import workloads  # noqa: E402
from collectors.simulate.training import HOST_JITTER_SD, MICROBATCHES, STEP_S_MEDIAN, JobShape, job_shape, run_job  # noqa: E402

PUBLISHED = {"training": 37.5, "inference": 9.0}
WINDOW_SLOTS = 20
"""2 s at 100 ms."""


def max_swing_w(total_w: np.ndarray, slots: int = WINDOW_SLOTS) -> float:
    """Largest max − min of ``total_w`` inside any ``slots``-long window (sliding by one slot)."""
    win = np.lib.stride_tricks.sliding_window_view(total_w, slots)
    return float(np.max(win.max(axis=1) - win.min(axis=1)))


def host_slots(path: Path, epoch: int, n_slots: int) -> np.ndarray:
    """One host's summed power on the 100 ms grid (the simple shape has one sample per GPU and slot)."""
    t = pq.read_table(path, columns=["ts", "power_w"])
    slot = (epoch_ns(t["ts"]).to_numpy() - epoch) // 100_000_000
    out = np.zeros(n_slots)
    np.add.at(out, np.clip(slot, 0, n_slots - 1), t["power_w"].to_numpy().astype(np.float64))
    return out


def training_swing(n_hosts: int, hours: float, host_jitter_sd: float, stage_offset_s: float, seed: int = 0,
                   pp: int = 1, microbatches: int = MICROBATCHES, shape: JobShape | None = None) -> dict:
    """The training cluster's largest 2 s swing for one setting of the job model, from per-GPU samples."""
    span_s = hours * 3600.0
    events = run_job(np.random.default_rng([seed, 1]), [8] * n_hosts, span_s + 30.0,
                     host_jitter_sd=host_jitter_sd, stage_offset_s=stage_offset_s, pp=pp, microbatches=microbatches, shape=shape)
    total = np.zeros(int(round(span_s * 10)))
    for h, ev in enumerate(events):
        for g in range(8):
            r = np.random.default_rng([seed, 2, h, g])
            rec, _ = power.sample_gpu(r, ev.timeline, (0.0, span_s), 0, 0.0, power.MEM_TRAINING_MIB,
                                      float(r.normal(1.0, 0.02)), 0.0)
            total += rec.power_w
    total = total[WINDOW_SLOTS:-WINDOW_SLOTS]
    prov = HOST_PROVISIONED_W * n_hosts
    sw = max_swing_w(total)
    row = {"gpus": 8 * n_hosts, "host_jitter_sd": host_jitter_sd, "stage_offset_s": stage_offset_s,
           "pp": shape.pp if shape else pp, "microbatches": microbatches}
    if shape is not None:
        slot_s = STEP_S_MEDIAN / (microbatches + shape.pp - 1)
        row |= {"params_b": shape.params_b, "tp": shape.tp, "dp": shape.dp, "overlap": shape.overlap,
                "link_gb_s": shape.link_bytes_s / 1e9, "allreduce_ms": round(1e3 * shape.allreduce_s, 1),
                "exposed_comm_ms": round(1e3 * float(shape.exposed_comm_s(slot_s * 2 / 3)), 1),
                "optimizer_ms": round(1e3 * shape.optimizer_s, 1), "bubble_pct": round(100 * (shape.pp - 1) / (microbatches + shape.pp - 1), 1)}
    return row | {"mean_w": round(float(total.mean())), "min_w": round(float(total.min())), "max_w": round(float(total.max())),
                  "max_2s_swing_w": round(sw), "max_2s_swing_pct": round(100 * sw / prov, 1)}


def paper_shape(n_hosts: int) -> JobShape:
    """The paper fleet's training job as the simulator builds it."""
    fleet = resolve_inventory(paper_fleet(1, n_hosts))
    name, members = next(iter(workloads(fleet)[1].items()))
    shape = job_shape(fleet.workload_spec("job", name), sum(len(g) for _, g in members))
    assert shape is not None
    return shape


def pipeline_sweep(n_hosts: int, hours: float, out: Path) -> None:
    """The 3D-parallel job's swing, one parameter changed at a time from the paper job."""
    base = paper_shape(n_hosts)
    settings: list[tuple[str, JobShape, int, dict]] = [
        ("the paper job", base, MICROBATCHES, {}),
        ("gradients reduced after the backward (no overlap)", replace(base, overlap=False), MICROBATCHES, {}),
        ("32 micro-batches", base, 32, {}),
        ("64 micro-batches", base, 64, {}),
        ("128 micro-batches", base, 128, {}),
        ("pp 8, dp 16", replace(base, pp=8, dp=base.dp * 2), MICROBATCHES, {}),
        ("pp 4, dp 32", replace(base, pp=4, dp=base.dp * 4), MICROBATCHES, {}),
        ("70B model", replace(base, params_b=70.0), MICROBATCHES, {}),
        ("405B model", replace(base, params_b=405.0), MICROBATCHES, {}),
        ("200 GB/s per GPU", replace(base, link_bytes_s=200e9), MICROBATCHES, {}),
        ("128 micro-batches and 200 GB/s", replace(base, link_bytes_s=200e9), 128, {}),
        ("wait level 300-360 W (assumed NCCL spin)", base, MICROBATCHES, {"COMM_W": (300.0, 360.0)}),
        ("wait level 420-480 W", base, MICROBATCHES, {"COMM_W": (420.0, 480.0)}),
        ("host jitter 5 %", base, MICROBATCHES, {"jitter": 0.05}),
    ]
    t0 = time.process_time()
    rows = []
    for label, shape, m, extra in settings:
        saved = phases.COMM_W
        phases.COMM_W = extra.get("COMM_W", saved)
        try:
            row = training_swing(n_hosts, hours, extra.get("jitter", HOST_JITTER_SD), 0.0, microbatches=m, shape=shape)
        finally:
            phases.COMM_W = saved
        rows.append({"setting": label, "wait_w": list(extra.get("COMM_W", saved))} | row)
        print(f"{label:<50} {row['max_2s_swing_pct']:>5.1f} %  mean {row['mean_w'] / 1e3:>6.0f} kW  exposed "
              f"{row['exposed_comm_ms']:>6.1f} ms  optimizer {row['optimizer_ms']:>5.1f} ms", flush=True)
    result = {"hours": hours, "published_pct": PUBLISHED["training"], "cpu_s": round(time.process_time() - t0, 1), "sweep": rows}
    out.mkdir(parents=True, exist_ok=True)
    (out / "paper-pipeline-sweep.json").write_text(json.dumps(result, indent=1) + "\n")


def training_sweep(n_hosts: int, hours: float, out: Path) -> None:
    settings = [(HOST_JITTER_SD, 0.0), (0.05, 0.0), (0.1, 0.0), (0.2, 0.0),
                (HOST_JITTER_SD, 0.1), (HOST_JITTER_SD, 0.25), (HOST_JITTER_SD, 0.5), (HOST_JITTER_SD, 0.75),
                (HOST_JITTER_SD, 1.0), (HOST_JITTER_SD, 1.25), (HOST_JITTER_SD, 1.5), (HOST_JITTER_SD, 1.85), (0.1, 1.85)]
    t0 = time.process_time()
    rows = [training_swing(n_hosts, hours, j, o) for j, o in settings]
    rows.append(training_swing(max(1, n_hosts // 8), hours, HOST_JITTER_SD, 0.0))
    lock_step_drop_w = 8 * (np.mean(phases.STEP_W) - np.mean(phases.COMM_W))
    result = {"hours": hours, "published_pct": PUBLISHED["training"], "cpu_s": round(time.process_time() - t0, 1),
              "lock_step_drop_per_host_w": round(float(lock_step_drop_w)),
              "lock_step_drop_pct_of_host": round(float(100 * lock_step_drop_w / HOST_PROVISIONED_W), 1),
              "sweep": rows}
    print(json.dumps(result, indent=1))
    out.mkdir(parents=True, exist_ok=True)
    (out / "paper-training-sweep.json").write_text(json.dumps(result, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the 256 inference and 128 training hosts")
    ap.add_argument("--hours", type=float, default=0.5)
    ap.add_argument("--workdir", type=Path, default=REPO / "bench" / "work" / "paper")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "img")
    ap.add_argument("--keep", action="store_true", help="keep the simulated data dir")
    ap.add_argument("--training-sweep", action="store_true", help="sweep the training job's desynchronisation instead")
    ap.add_argument("--pipeline-sweep", action="store_true", help="sweep the paper job's pipeline depth and micro-batches instead")
    args = ap.parse_args()
    n_inf, n_trn = max(1, round(256 * args.scale)), max(1, round(128 * args.scale))
    if args.training_sweep:
        training_sweep(n_trn, args.hours, args.out)
        return
    if args.pipeline_sweep:
        pipeline_sweep(n_trn, args.hours, args.out)
        return
    shutil.rmtree(args.workdir, ignore_errors=True)
    args.workdir.mkdir(parents=True)
    fleet = args.workdir / "paper.yaml"
    fleet.write_text(yaml.safe_dump(paper_fleet(n_inf, n_trn)))
    day = dt.date(2026, 12, 1)
    t0 = time.monotonic()
    summary = simulate(args.workdir / "data", start=day, seed=0, fleet=fleet, hours=args.hours)
    sim_s = time.monotonic() - t0
    epoch = int(dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC).timestamp()) * 10**9
    n_slots = int(args.hours * 36_000)
    per_host = {}
    for f in sorted((args.workdir / "data" / "power").rglob("*.parquet")):
        host = f.parent.name.removeprefix("host=")
        per_host[host] = per_host.get(host, 0) + host_slots(f, epoch, n_slots)
    cut = slice(WINDOW_SLOTS, n_slots - WINDOW_SLOTS)  # edges: samples of the first/last slot may be partial
    rows = {}
    for role, prefix, _n in (("inference", "inf-", n_inf), ("training", "trn-", n_trn)):
        hosts = sorted(h for h in per_host if h.startswith(prefix))
        total = np.sum([per_host[h] for h in hosts], axis=0)[cut]
        prov = HOST_PROVISIONED_W * len(hosts)
        sw = max_swing_w(total)
        rows[role] = {"gpus": 8 * len(hosts), "provisioned_w": prov, "mean_w": float(total.mean()),
                      "max_2s_swing_w": sw, "max_2s_swing_pct": 100 * sw / prov, "published_pct": PUBLISHED[role]}
    hosts = sorted(h for h in per_host if h.startswith("inf-"))
    by_k = []
    k = 1
    while k <= len(hosts):
        total = np.sum([per_host[h] for h in hosts[:k]], axis=0)[cut]
        by_k.append({"endpoints": k, "gpus": 8 * k, "max_2s_swing_pct": 100 * max_swing_w(total) / (HOST_PROVISIONED_W * k)})
        k *= 2
    result = {"hours": args.hours, "scale": args.scale, "gpus": summary.gpus, "power_rows": summary.power_rows,
              "requests": summary.requests, "simulate_s": round(sim_s, 1), "clusters": rows, "inference_by_endpoints": by_k}
    print(json.dumps(result, indent=1))
    args.out.mkdir(parents=True, exist_ok=True)
    import altair as alt
    import vl_convert as vlc

    chart = alt.Chart(alt.Data(values=by_k)).mark_line(point=True).encode(
        x=alt.X("endpoints:Q", scale=alt.Scale(type="log", base=2), title="endpoints (8 GPUs each) summed"),
        y=alt.Y("max_2s_swing_pct:Q", title="largest 2 s swing, % of provisioned"),
    ).properties(title=f"Inference: 2 s swing vs endpoints ({args.hours} h from 00:00 UTC = 16:00-19:00 local, seed 0)", width=440, height=240)
    rule = alt.Chart(alt.Data(values=[{"y": PUBLISHED["inference"]}])).mark_rule(strokeDash=[4, 4], color="gray").encode(y="y:Q")
    (args.out / "paper-inference-swing-vs-endpoints.png").write_bytes(vlc.vegalite_to_png((chart + rule).to_json(), scale=1.5))
    (args.out / "paper-swings.json").write_text(json.dumps(result, indent=1) + "\n")
    if not args.keep:
        shutil.rmtree(args.workdir / "data", ignore_errors=True)


if __name__ == "__main__":
    main()
