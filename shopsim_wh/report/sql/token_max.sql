-- token_max: the largest token count (in + out) and model step count of a completed episode of one domain's
-- runs ($domain) (sizes the histogram bins of token_hist.sql; NULL: no such episode).
-- grain: one row.
SELECT max(coalesce(tokens_in, 0) + coalesce(tokens_out, 0)) AS max_tokens, max(model_steps) AS max_steps
FROM report_episodes
WHERE domain = $domain AND completed AND (tokens_in IS NOT NULL OR tokens_out IS NOT NULL OR model_steps IS NOT NULL);
