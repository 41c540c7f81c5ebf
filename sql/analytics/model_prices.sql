-- model_prices: USD per million tokens, used for cost in run_metrics (cost = tokens_in * in + tokens_out * out).
-- grain: one row per model name. key: model_name
-- Cost is NULL for models not listed. The shipped rows price only the synthetic generator's models (demo
-- values, not vendor prices). To price your own, replace the view in your session before querying:
--   CREATE OR REPLACE VIEW model_prices AS
--   SELECT * FROM (VALUES ('my-model', 0.50, 1.50)) AS t (model_name, usd_per_mtok_in, usd_per_mtok_out);
-- (views are bound when queried, so run_metrics picks the new prices up). Portable SQL.
CREATE OR REPLACE VIEW model_prices AS
WITH prices (model_name, usd_per_mtok_in, usd_per_mtok_out) AS (
    VALUES
        ('synth-qwen-4b', 0.10, 0.40),
        ('synth-coder-large', 3.00, 15.00),
        ('synth-coder-small', 0.80, 4.00)
),

final AS (
    SELECT model_name, CAST(usd_per_mtok_in AS DOUBLE) AS usd_per_mtok_in, CAST(usd_per_mtok_out AS DOUBLE) AS usd_per_mtok_out
    FROM prices
)

SELECT * FROM final;
