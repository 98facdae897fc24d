SELECT map_from_entries(list((endpoint, {
           'j_per_prompt_token': round(j_per_prompt_token::DOUBLE, 4), 'j_per_output_token': round(j_per_output_token::DOUBLE, 4),
           'prefill_energy_share': round(prefill_energy_share::DOUBLE, 3), 'prefill_mean_w': round(prefill_mean_w::DOUBLE),
           'decode_mean_w': round(decode_mean_w::DOUBLE)}) ORDER BY endpoint)) AS by_endpoint
FROM energy_per_token
WHERE date = getvariable('partition_date') AND bucket_kind = 'all'
