-- cost: USD per completed episode per selected run, from tokens and the model_prices view
-- (tokens_in * usd_per_mtok_in + tokens_out * usd_per_mtok_out) / 1e6; priced = the model has a price row.
-- mean with its SEM (sample stddev / sqrt(n)), total over completed episodes.
-- grain: one row per selected run with completed episodes. key: run_id
WITH ep AS (
    SELECT
        e.run_id,
        e.model_name,
        p.model_name IS NOT NULL AS priced,
        (coalesce(e.tokens_in, 0) * p.usd_per_mtok_in + coalesce(e.tokens_out, 0) * p.usd_per_mtok_out) / 1e6 AS usd
    FROM report_episodes AS e
    LEFT JOIN model_prices AS p ON p.model_name = e.model_name
    WHERE e.completed
)

SELECT
    run_id,
    min(model_name) AS model_name,
    bool_and(priced) AS priced,
    count(*) AS episodes,
    avg(usd) AS usd_mean,
    stddev_samp(usd) / sqrt(count(usd)) AS usd_sem,
    avg(usd) - stddev_samp(usd) / sqrt(count(usd)) AS lo,
    avg(usd) + stddev_samp(usd) / sqrt(count(usd)) AS hi,
    sum(usd) AS usd_total
FROM ep
GROUP BY run_id
ORDER BY run_id;
