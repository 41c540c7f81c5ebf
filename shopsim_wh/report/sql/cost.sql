-- cost: USD per completed episode of one domain's runs ($domain) per series (report_runs.grp), from tokens and
-- the model_prices view: (tokens_in * usd_per_mtok_in + tokens_out * usd_per_mtok_out) / 1e6; priced = every
-- model of the series has a price row. mean with its SEM (sample stddev / sqrt(n)), total over completed episodes.
-- grain: one row per series with completed episodes. key: grp
WITH ep AS (
    SELECT
        e.grp,
        e.grp_pos,
        e.model_name,
        p.model_name IS NOT NULL AS priced,
        (coalesce(e.tokens_in, 0) * p.usd_per_mtok_in + coalesce(e.tokens_out, 0) * p.usd_per_mtok_out) / 1e6 AS usd
    FROM report_episodes AS e
    LEFT JOIN model_prices AS p ON p.model_name = e.model_name
    WHERE e.completed AND e.domain = $domain
)

SELECT
    grp,
    string_agg(DISTINCT coalesce(model_name, '(no model name)'), ', ' ORDER BY coalesce(model_name, '(no model name)'))
        AS model_name,
    bool_and(priced) AS priced,
    count(*) AS episodes,
    avg(usd) AS usd_mean,
    stddev_samp(usd) / sqrt(count(usd)) AS usd_sem,
    avg(usd) - stddev_samp(usd) / sqrt(count(usd)) AS lo,
    avg(usd) + stddev_samp(usd) / sqrt(count(usd)) AS hi,
    sum(usd) AS usd_total
FROM ep
GROUP BY grp
ORDER BY min(grp_pos), grp;
