SELECT count(*) AS endpoint_pairs,
       round(avg(pearson_1s), 3) AS mean_endpoint_pearson_1s,
       round(avg(spike_cooccurrence), 3) AS mean_endpoint_spike_cooccurrence,
       round(avg(spike_lift), 2) AS mean_endpoint_spike_lift
FROM endpoint_correlation
WHERE date = getvariable('partition_date') AND pair_kind = 'endpoint'
