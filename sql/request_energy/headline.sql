SELECT round(coalesce(sum(prefill_j) / nullif(sum(prompt_tokens), 0), 0), 4) AS j_per_prompt_token,
       round(coalesce(sum(decode_j) / nullif(sum(output_tokens), 0), 0), 4) AS j_per_output_token,
       round(coalesce(avg(total_j), 0), 1) AS j_per_request
FROM request_energy WHERE date = getvariable('partition_date')
