"""Power domains of the fleet (GPU, host, cluster, role, fleet) and what each is provisioned for."""

from __future__ import annotations

from collectors.inventory import Inventory


def gpu_entity(host: str, gpu: int) -> str:
    """The name of a GPU as an entity: ``host/gpu``."""
    return f"{host}/{gpu}"


def entity_rows(inv: Inventory) -> list[dict]:
    """One row per entity: level, name, provisioned_w (host/cluster as configured, else the sum
    of TDPs; a role or fleet sums its hosts / clusters), total TDP and GPU count."""
    rows: dict[tuple[str, str], dict] = {}

    def add(level: str, entity: str, provisioned_w: float, tdp_w: float, gpus: int) -> None:
        row = rows.setdefault((level, entity), dict(level=level, entity=entity, provisioned_w=0.0, tdp_w=0.0, gpus=0))
        row["provisioned_w"] += provisioned_w
        row["tdp_w"] += tdp_w
        row["gpus"] += gpus

    for fleet in inv.fleets:
        for cluster in fleet.clusters:
            cluster_tdp = sum(h.tdp_sum_w for h in cluster.hosts)
            n_cluster = sum(len(h.gpus) for h in cluster.hosts)
            add("cluster", cluster.name, cluster.effective_provisioned_w, cluster_tdp, n_cluster)
            add("fleet", fleet.name, cluster.effective_provisioned_w, cluster_tdp, n_cluster)
            for host in cluster.hosts:
                add("host", host.name, host.effective_provisioned_w, host.tdp_sum_w, len(host.gpus))
                add("role", host.role, host.effective_provisioned_w, host.tdp_sum_w, len(host.gpus))
                for gpu in host.gpus:
                    add("gpu", gpu_entity(host.name, gpu.index), gpu.tdp_w, gpu.tdp_w, 1)
    return list(rows.values())
