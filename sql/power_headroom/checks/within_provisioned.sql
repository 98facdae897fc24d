-- severity: WARN
-- description: No host or cluster exceeded its provisioned power over any 2 s window (a real finding, not a bug).
-- failure: {n} domain(s) drew more than provisioned power over a 2 s window
SELECT level || ':' || entity AS domain, round(max_2s_w) AS max_2s_w, provisioned_w FROM power_headroom
WHERE date = getvariable('partition_date') AND max_2s_w > provisioned_w ORDER BY 1
