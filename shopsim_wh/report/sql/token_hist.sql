-- token_hist: the distribution of tokens (in + out) per completed episode of one domain's runs ($domain), per
-- series (report_runs.grp), in bins of $width tokens: bin_start <= tokens < bin_end.
-- grain: one row per (grp, bin_start). key: (grp, bin_start)
WITH t AS (
    SELECT grp, grp_pos, coalesce(tokens_in, 0) + coalesce(tokens_out, 0) AS tokens
    FROM report_episodes
    WHERE domain = $domain AND completed AND (tokens_in IS NOT NULL OR tokens_out IS NOT NULL)
)

SELECT
    grp,
    CAST(floor(tokens / $width) * $width AS BIGINT) AS bin_start,
    CAST(floor(tokens / $width) * $width + $width AS BIGINT) AS bin_end,
    count(*) AS episodes
FROM t
GROUP BY grp, bin_start, bin_end
ORDER BY min(grp_pos), grp, bin_start;
