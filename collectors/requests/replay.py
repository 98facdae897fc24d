"""`wattline simulate --replay-arrivals azure FILE`: a real arrival trace drives the simulated endpoints.

The simulator (``collectors.simulate.simulate(..., arrivals={endpoint: Arrivals})``) replays
given arrivals instead of its synthetic Poisson process. This module turns a trace into that
mapping. The trace's requests are dealt round-robin over the inference endpoints in arrival
order, so the fleet as a whole sees exactly the trace's arrival shape and token mix, while each
endpoint gets an independent-looking share (giving every endpoint the whole trace would both
multiply the load and synchronise the endpoints' spikes).

Hook (for ``pipeline/cli/simulate.py``, after the simulator is merged)::

    from collectors.requests.replay import load_replay_arrivals, replay_arrivals_option

    @replay_arrivals_option
    def command(..., replay_arrivals):
        arrivals = None
        if replay_arrivals:
            kind, path = replay_arrivals
            arrivals = load_replay_arrivals(kind, path, inference_endpoints_of(fleet))
        simulate(data_dir, ..., arrivals=arrivals)
"""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from collectors.requests.azure import Arrivals, NotAzureTrace, azure_arrivals

REPLAY_KINDS = ("azure",)


def split_round_robin(arrivals: Arrivals, endpoints: list[str]) -> dict[str, Arrivals]:
    """Deal requests over ``endpoints`` in arrival order; offsets keep the trace's own clock."""
    if not endpoints:
        raise ValueError("no inference endpoints to replay the trace on")
    order = np.argsort(arrivals.offset_s, kind="stable")
    out = {}
    for i, name in enumerate(endpoints):
        take = order[i :: len(endpoints)]
        out[name] = Arrivals(
            offset_s=arrivals.offset_s[take],
            prompt_tokens=arrivals.prompt_tokens[take],
            output_tokens=arrivals.output_tokens[take],
        )
    return out


def load_replay_arrivals(kind: str, path: Path | str, endpoints: list[str], origin: str = "first") -> dict[str, Arrivals]:
    """``{endpoint: Arrivals}`` from a trace file, for ``simulate(..., arrivals=...)``."""
    if kind != "azure":
        raise click.ClickException(f"unknown trace kind {kind!r}: expected one of {', '.join(REPLAY_KINDS)}")
    try:
        return split_round_robin(azure_arrivals(path, origin=origin), list(endpoints))
    except (OSError, NotAzureTrace) as exc:
        raise click.ClickException(f"cannot replay {path}: {exc}") from None


def replay_arrivals_option(func):
    """``--replay-arrivals azure FILE`` (a (kind, Path) tuple, or None)."""
    return click.option(
        "--replay-arrivals",
        "replay_arrivals",
        type=(click.Choice(REPLAY_KINDS), click.Path(exists=True, dir_okay=False, path_type=Path)),
        default=None,
        metavar="KIND FILE",
        help="Drive the inference endpoints with a real arrival trace (times and token counts) "
        "instead of the synthetic Poisson process; the requests are dealt round-robin over the endpoints.",
    )(func)
