-- NULL (not 0) where no request had power; a request without a logged token count adds neither joules nor tokens
SELECT round(sum(prefill_j) FILTER (WHERE prompt_tokens IS NOT NULL) / nullif(sum(prompt_tokens) FILTER (WHERE prefill_j IS NOT NULL), 0), 4) AS j_per_prompt_token,
       round(sum(decode_j) FILTER (WHERE output_tokens IS NOT NULL) / nullif(sum(output_tokens) FILTER (WHERE decode_j IS NOT NULL), 0), 4) AS j_per_output_token,
       round(avg(total_j), 1) AS j_per_request,
       round(avg(power_coverage), 4) AS mean_power_coverage
FROM request_energy WHERE date = getvariable('partition_date')
