-- token_max: the largest token count (in + out) of a completed episode over the selected rollout runs (sizes the
-- histogram bins of token_hist.sql).
-- grain: one row.
SELECT max(coalesce(tokens_in, 0) + coalesce(tokens_out, 0)) AS max_tokens, max(model_steps) AS max_steps
FROM report_episodes
WHERE kind = 'rollout' AND completed;
