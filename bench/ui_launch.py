"""A cluster-day launched from the UI against the same cluster-day in `wattline run`, in one sitting.

    python -m bench.ui_launch --data-dir DIR --date D [--cluster C] [--repeat 2]

Alternates: `wattline run --date D --workers 1` (its cluster-day run's own start → end in the
Dagster instance, and the command's wall time), then the cluster-day job launched the way the
UI's Materialize button does (GraphQL ``launchRun`` on a `wattline ui` with automation off; the run
queue, the run launcher's subprocess and the job's executor), timed from the launch request to the
run's end and from the run's start to its end. Prints one JSON line per measurement and a summary:
the numbers in docs/benchmarks.md ("A cluster-day launched from the UI"). Imports nothing of the
repo, so PYTHONPATH picks the code measured (e.g. an archive of an older commit).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
import warnings
from pathlib import Path

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def open_instance(data_dir: Path):
    from dagster import DagsterInstance

    os.environ["DAGSTER_HOME"] = str(data_dir / ".dagster")  # its dagster.yaml reads it
    return DagsterInstance.get()


def run_record(data_dir: Path, run_id: str):
    with open_instance(data_dir) as inst:
        return inst.get_run_record_by_id(run_id)


def cluster_day_run_ids(data_dir: Path, date: str, cluster: str) -> list[str]:
    from dagster import RunsFilter

    tags = {"dagster/partition/date": date, "dagster/partition/cluster": cluster}
    with open_instance(data_dir) as inst:
        return list(inst.get_run_ids(RunsFilter(job_name="cluster_day_job", tags=tags)))


def cli_run(data_dir: Path, date: str, cluster: str) -> dict:
    before = set(cluster_day_run_ids(data_dir, date, cluster))
    t0 = time.monotonic()
    subprocess.run([str(BIN / "wattline"), "run", "--date", date, "--workers", "1", "--data-dir", str(data_dir)],
                   check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - t0
    [run_id] = set(cluster_day_run_ids(data_dir, date, cluster)) - before
    record = run_record(data_dir, run_id)
    return {"how": "wattline run", "run_s": round(record.end_time - record.start_time, 1), "command_wall_s": round(wall, 1),
            "status": record.dagster_run.status.value}


def ui_launch(client, data_dir: Path, date: str, cluster: str) -> dict:
    # the tags the UI's Materialize sets for one day × cluster (Dagster's own keys, which its client calls non-compliant)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    tags = {"dagster/partition": f"{cluster}|{date}", "dagster/partition/cluster": cluster, "dagster/partition/date": date}
    t0 = time.time()
    run_id = client.submit_job_execution("cluster_day_job", repository_location_name="pipeline.definitions", tags=tags)
    while True:
        record = run_record(data_dir, run_id)
        if record and record.dagster_run.is_finished:
            break
        time.sleep(0.5)
    return {"how": "UI launch", "run_s": round(record.end_time - record.start_time, 1), "launch_to_end_s": round(record.end_time - t0, 1),
            "status": record.dagster_run.status.value}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--date", required=True)
    parser.add_argument("--cluster", default="c0")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    from dagster_graphql import DagsterGraphQLClient

    data_dir = args.data_dir.resolve()
    port = free_port()
    env = dict(os.environ, WATTLINE_AUTOMATION="off")
    log = open(data_dir.parent / "ui_launch.log", "wb")
    ui = subprocess.Popen([str(BIN / "wattline"), "ui", "--port", str(port), "--data-dir", str(data_dir)],
                          stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    results = []
    try:
        for _ in range(180):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2)
                break
            except OSError:
                time.sleep(1)
        client = DagsterGraphQLClient("127.0.0.1", port_number=port)
        for _ in range(args.repeat):
            for measure in (lambda: cli_run(data_dir, args.date, args.cluster), lambda: ui_launch(client, data_dir, args.date, args.cluster)):
                results.append(measure())
                print(json.dumps(results[-1]), flush=True)
    finally:
        os.killpg(ui.pid, signal.SIGINT)
        ui.wait(timeout=60)
    cli = statistics.median(r["run_s"] for r in results if r["how"] == "wattline run")
    launched = statistics.median(r["launch_to_end_s"] for r in results if r["how"] == "UI launch")
    print(json.dumps({"wattline_run_cluster_day_s": cli, "ui_launch_to_end_s": launched, "ratio": round(launched / cli, 2)}))


if __name__ == "__main__":
    main()
