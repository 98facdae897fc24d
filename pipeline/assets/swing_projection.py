"""`swing_projection`: how the 2 s swing of a cluster's inference endpoints (and of a training job's
hosts) would look with more of them, from the day's own series (pipeline/swing_projection.py)."""

import datetime as dt

import numpy as np
import pyarrow as pa

from pipeline import swing_projection as sp
from pipeline.kernels import registered
from pipeline.tables import Connection, Table, TableRun, table_assets

SCHEMA = pa.schema([
    ("date", pa.date32()), ("kind", pa.string()), ("entity", pa.string()), ("members", pa.int32()),
    ("gpus", pa.int32()), ("gpus_low", pa.int32()), ("gpus_high", pa.int32()), ("method", pa.string()),
    ("max_2s_swing_pct", pa.float64()), ("max_2s_swing_pct_low", pa.float64()), ("max_2s_swing_pct_high", pa.float64()),
    ("p99_2s_swing_pct", pa.float64()), ("p99_2s_swing_pct_low", pa.float64()), ("p99_2s_swing_pct_high", pa.float64()),
    ("provisioned_w", pa.float64()), ("draws", pa.int32()), ("members_observed", pa.int32()), ("members_read", pa.int32()),
    ("published_scale", pa.bool_()), ("published_gpus", pa.int32()), ("published_2s_swing_pct", pa.float64()),
])

_MEMBERS = """
WITH g AS (
    SELECT cluster, host, gpu, endpoint, job, role,
        host_provisioned_w / count(*) OVER (PARTITION BY host) AS share_w
    FROM inventory_gpus
),
reporting AS (SELECT DISTINCT host, gpu FROM power_100ms WHERE date = getvariable('partition_date'))
SELECT CASE WHEN role = 'inference' THEN 'inference' ELSE 'training' END AS kind,
    CASE WHEN role = 'inference' THEN cluster ELSE job END AS entity,
    CASE WHEN role = 'inference' THEN endpoint ELSE host END AS member,
    host, gpu, share_w
FROM g SEMI JOIN reporting USING (host, gpu)
WHERE (role = 'inference' AND endpoint IS NOT NULL) OR (role = 'training' AND job IS NOT NULL)
"""

_SERIES = """
-- each member by its position in $members (0-based): an integer column, not a string per row
SELECT list_position($members, m.member) - 1 AS member, (epoch_ms(p.ts) // 100)::BIGINT AS slot, sum(p.power_w)::DOUBLE AS power_w,
       count(*) AS gpus
FROM power_100ms AS p JOIN _projection_members AS m USING (host, gpu)
WHERE p.date = getvariable('partition_date') AND m.kind = $kind AND m.entity = $entity AND m.member IN (SELECT unnest($members))
GROUP BY ALL
"""


def projection(con: Connection, run: TableRun) -> pa.Table:
    """The table's rows: per kind (inference: a cluster's endpoints; training: a job's hosts) the
    kernel's rows, one entity at a time; at most sp.MAX_MEMBERS_READ series read each."""
    with registered(con, "_projection_members", con.sql(_MEMBERS).pl()):
        out = _rows(con, str(run.scope.date))
    out.sort(key=lambda r: (r["kind"], r["entity"], r["members"]))
    return pa.Table.from_pylist(out, schema=SCHEMA)


def _rows(con: Connection, day: str) -> list[dict]:
    out: list[dict] = []
    entities = con.execute(
        "SELECT kind, entity, member, count(*) AS gpus, sum(share_w) AS provisioned_w FROM _projection_members "
        "GROUP BY ALL ORDER BY kind, entity, member").fetchall()
    by_entity: dict[tuple[str, str], list[tuple[str, int, float]]] = {}
    for kind, entity, member, gpus, prov in entities:
        by_entity.setdefault((kind, entity), []).append((member, gpus, prov))
    for (kind, entity), members in by_entity.items():
        seed = sp.seed_for(day, kind, entity)
        observed = len(members)
        if observed > sp.MAX_MEMBERS_READ:
            pick = np.random.default_rng(seed).choice(observed, sp.MAX_MEMBERS_READ, replace=False)
            members = [members[i] for i in sorted(pick)]
        names = [m for m, _, _ in members]
        cols = con.execute(_SERIES, {"kind": kind, "entity": entity, "members": names}).fetchnumpy()
        if len(cols["slot"]) == 0:
            continue
        slot0 = int(cols["slot"].min())
        length = int(cols["slot"].max()) - slot0 + 1
        series = np.full((len(names), length), np.nan, dtype=np.float32)
        row = np.asarray(cols["member"], np.int64)
        want = np.array([g for _, g, _ in members], np.int64)[row]
        complete = cols["gpus"] == want  # slots where every reporting GPU of the member has a value
        series[row[complete], cols["slot"][complete] - slot0] = cols["power_w"][complete]
        series = sp.observed_span(series)
        gpus = np.array([g for _, g, _ in members], dtype=float)
        prov = np.array([p for _, _, p in members], dtype=float)
        published_gpus, published_pct = sp.PUBLISHED[kind]
        ks, k_pub = sp.k_grid(observed, float(gpus.mean()), published_gpus)
        rows = sp.project(series, prov, gpus, ks, shift=kind == "inference", seed=seed)
        out += [{
            **r, "date": dt.date.fromisoformat(day), "kind": kind, "entity": entity, "members_observed": observed, "members_read": len(names),
            "method": "observed" if r["members"] <= observed else r["method"],
            "published_scale": r["members"] == k_pub, "published_gpus": published_gpus,
            "published_2s_swing_pct": published_pct if r["members"] == k_pub else None,
        } for r in rows]
    return out


SWING_PROJECTION = Table(
    "swing_projection",
    "Per cluster's inference endpoints and per training job, day and k: the 2 s swing (max and p99, % of "
    "the summed members' provisioned power, 100 ms grid) of the sum of k members, observed up to the "
    "members there are and projected beyond (inference: copies shifted by up to ±30 min, assuming "
    "independent endpoints; training: in step), median and band over seeded draws (docs/metrics.md).",
    "cluster-day",
    deps=["power_100ms"],
    rows=projection,
    group="swings",  # beside swing_stats: the power group's graph stays small enough to draw its names
)
(swing_projection,) = table_assets(SWING_PROJECTION)
