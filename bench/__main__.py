"""`python -m bench [throughput|storage|queries|scaling|all] [--sizes 8,64,256] [--work DIR] [--shape simple|collector]` (`make bench`).

Each benchmark prints a table, with ratios against baselines measured in the same run, and
writes bench/results/<name>.json. The collector's overhead on a real GPU is bench/device_proof.py.
`python -m bench accuracy` (not part of `all`: it reads the shared data folder beside the checkout)
is bench/capture_accuracy.py with its defaults: the energy tables on the real H200 captures against
an independent reference.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from bench import queries, scaling, storage, throughput

warnings.filterwarnings("ignore", module="dagster")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("which", nargs="?", default="all", choices=["throughput", "storage", "queries", "scaling", "accuracy", "all"])
    parser.add_argument("--sizes", default="8,64,256", help="GPU-days to generate (multiples of 8)")
    parser.add_argument("--work", type=Path, default=Path("bench/work"), help="where generated data is kept (reused)")
    parser.add_argument("--shape", default="simple", choices=["simple", "collector"],
                        help="throughput on the simulator's 10 Hz series or on collector-shaped rows (results/throughput-collector.json)")
    args = parser.parse_args()
    if args.which == "accuracy":
        from bench import capture_accuracy  # imports the pipeline's runner and the tests' helpers: only when asked

        capture_accuracy.main([])
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    args.work.mkdir(parents=True, exist_ok=True)
    if args.which in ("throughput", "all"):
        throughput.main(sizes, args.work.resolve(), args.shape)
    probe = args.work.resolve() / f"gpus-{64 if 64 in sizes else sizes[0]}"
    if args.which in ("storage", "all"):
        storage.main(probe)
    if args.which in ("queries", "all"):
        queries.main(probe)
    if args.which in ("scaling", "all"):
        scaling.main(args.work.resolve())


if __name__ == "__main__":
    main()
