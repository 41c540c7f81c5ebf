-- gate_coefficients: the coefficients of every recorded gate decision (gate_results.coefficients unpacked), to
-- chart decisions across checkpoints.
-- grain: one row per (gate decision, coefficient). key: (gate_id, name)
-- name = the covariate (a skill id by default); beta, se, t, p, ci_low, ci_high as the gate computed them (se, t,
-- p and the interval are NULL for strictly-positive-top-k); rank = top-k's rank (NULL for significance);
-- status = top-k's 'selected' / 'non_positive' / 'budget_excluded', else by the significance rule at the
-- decision's alpha: 'helps' (beta > 0, p < alpha, CI above 0), 'hurts' (beta < 0 and p < alpha or CI below 0),
-- 'neutral'.
-- DuckDB-specific: from_json, unnest.
CREATE OR REPLACE VIEW gate_coefficients AS
WITH c AS (
    SELECT g.run_id, g.gate_id, g.decided_at, g.rule, g.decision, g.bare_run, g.treatment_run,
           g.bare_checkpoint_id, g.treatment_checkpoint_id, g.alpha, g.n_pairs,
           unnest(from_json(g.coefficients, '[{"name": "VARCHAR", "beta": "DOUBLE", "se": "DOUBLE", "t": "DOUBLE",
               "p": "DOUBLE", "ci_low": "DOUBLE", "ci_high": "DOUBLE", "rank": "INTEGER", "status": "VARCHAR"}]')) AS k
    FROM gate_results AS g
)
SELECT run_id, gate_id, decided_at, rule, decision, bare_run, treatment_run, bare_checkpoint_id,
       treatment_checkpoint_id, n_pairs, k.name AS name, k.beta AS beta, k.se AS se, k.t AS t, k.p AS p,
       k.ci_low AS ci_low, k.ci_high AS ci_high, k.rank AS rank,
       CASE
           WHEN k.status IS NOT NULL THEN k.status
           WHEN k.beta > 0 AND k.p < alpha AND (k.ci_low IS NULL OR k.ci_low > 0) THEN 'helps'
           WHEN k.beta < 0 AND (k.p < alpha OR k.ci_high < 0) THEN 'hurts'
           ELSE 'neutral'
       END AS status
FROM c;
