-- token_hist: the distribution of tokens (in + out) per completed episode, per selected rollout run, in bins of
-- $width tokens: bin_start <= tokens < bin_end.
-- grain: one row per (run_id, bin_start). key: (run_id, bin_start)
WITH t AS (
    SELECT run_id, coalesce(tokens_in, 0) + coalesce(tokens_out, 0) AS tokens
    FROM report_episodes
    WHERE kind = 'rollout' AND completed AND (tokens_in IS NOT NULL OR tokens_out IS NOT NULL)
)

SELECT
    run_id,
    CAST(floor(tokens / $width) * $width AS BIGINT) AS bin_start,
    CAST(floor(tokens / $width) * $width + $width AS BIGINT) AS bin_end,
    count(*) AS episodes
FROM t
GROUP BY ALL
ORDER BY run_id, bin_start;
