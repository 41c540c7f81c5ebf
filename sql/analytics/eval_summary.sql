-- eval_summary: every figure of ShopSimRL's summary.json (schema shopsimrl-eval-summary-v2), computed from the
-- warehouse by the rules of the original (shopsimrl/evaluation.py summarize_traces, cli.py summarize).
-- grain: one row per run. key: run_id
--
-- Columns are the summary's leaf names; its keyed objects are MAPs keyed as the original keys them.
-- counts     requested = the manifest's job count (runs.provenance $.manifest.plan.jobs), else
--            runs.planned_episodes, else trace_files; trace_files = episodes (last attempt of each episode id);
--            completed / failed by episode_completed (run_metrics.sql); scored = completed episodes with a
--            reward; coverage = completed / requested (0.0 when nothing was requested)
-- primary    reward_mean, reward_sem (sample stddev / sqrt(n), NULL below 2), success_rate (mean reported
--            r_success): run_metrics' figures. `reward` is the server's top-level reward, its meaning is
--            primary_reward (r_strict for shop_env runs)
-- reward_components  MAP r_* -> mean over completed episodes of every numeric (not boolean) `r_*` key of the
--            stored reward_detail JSON, each over the episodes that have it: what the server reported,
--            never a value shopsim-wh derived
-- behavior   steps_mean (model steps per completed episode), model_steps, protocol_errors,
--            protocol_error_rate, invalid_action_rate, invalid_actions, total_actions: run_metrics' figures;
--            policy_failures = steps with a policy_failure, policy_failure_rate = policy_failures / model_steps
--            (NULL without steps); termination_reasons MAP reason -> completed episodes ('unknown' when NULL)
-- cost       duration_ms_mean = mean wall time of completed episodes in ms; tokens MAP over the steps of
--            completed episodes: prompt_tokens (steps.tokens_in), completion_tokens (steps.tokens_out),
--            total_tokens and reasoning_tokens (usage.completion_tokens_details) from the raw usage kept in
--            steps.metadata $.usage; a key is present only when some step reported it
-- errors     MAP error type -> failed episodes ('unknown' when the attempt has none)
-- Not reproduced: created_at (when the original wrote the file). Limits: a line the v4 reader rejected but
-- Python's json reads is a failed attempt with error_type = the ingest error class (the original would read its
-- fields). A completed record whose final.done is not true is stored with done = false by the v4 reader, so
-- it counts as failed, as in the original; sources without a done flag (done NULL) count by status.
-- shopsim_wh.analytics.summary.eval_summary_json assembles a row into the summary.json shape.
-- DuckDB-specific: MAP, json_each / json_extract, the macros.
CREATE OR REPLACE VIEW eval_summary AS
WITH ended AS (  -- every episode's final attempt with the original's completed flag
    SELECT run_id, episode_id, termination_reason, error_type, reward_detail,
           episode_completed(status, done) AS completed
    FROM episodes
),

components AS (
    SELECT e.run_id, j.key AS component, avg(CAST(j.value AS DOUBLE)) AS mean
    FROM ended AS e, json_each(e.reward_detail) AS j
    WHERE e.completed AND starts_with(j.key, 'r_') AND json_type(j.value) IN ('UBIGINT', 'BIGINT', 'HUGEINT', 'DOUBLE')
    GROUP BY e.run_id, j.key
),

step_totals AS (
    SELECT
        s.run_id,
        count(s.policy_failure) AS policy_failures,
        sum(s.tokens_in) AS prompt_tokens,
        sum(s.tokens_out) AS completion_tokens,
        sum(CASE WHEN json_type(s.metadata, '$.usage.total_tokens') IN ('UBIGINT', 'BIGINT')
            THEN CAST(json_extract(s.metadata, '$.usage.total_tokens') AS BIGINT) END) AS total_tokens,
        sum(CASE WHEN json_type(s.metadata, '$.usage.completion_tokens_details.reasoning_tokens') IN ('UBIGINT', 'BIGINT')
            THEN CAST(json_extract(s.metadata, '$.usage.completion_tokens_details.reasoning_tokens') AS BIGINT) END)
            AS reasoning_tokens
    FROM steps AS s
    JOIN ended AS e ON e.run_id = s.run_id AND e.episode_id = s.episode_id
    WHERE e.completed
    GROUP BY s.run_id
),

endings AS (
    SELECT run_id, map_from_entries(list({'key': reason, 'value': n} ORDER BY reason)) AS termination_reasons
    FROM (SELECT run_id, coalesce(termination_reason, 'unknown') AS reason, count(*) AS n
          FROM ended WHERE completed GROUP BY 1, 2)
    GROUP BY run_id
),

errors AS (
    SELECT run_id, map_from_entries(list({'key': kind, 'value': n} ORDER BY kind)) AS errors
    FROM (SELECT run_id, coalesce(error_type, 'unknown') AS kind, count(*) AS n
          FROM ended WHERE NOT completed GROUP BY 1, 2)
    GROUP BY run_id
),

component_maps AS (
    SELECT run_id, map_from_entries(list({'key': component, 'value': mean} ORDER BY component)) AS reward_components
    FROM components
    GROUP BY run_id
),

token_maps AS (
    SELECT run_id, map_from_entries(list({'key': k, 'value': v} ORDER BY k)) AS tokens
    FROM (
        SELECT run_id, 'prompt_tokens' AS k, prompt_tokens AS v FROM step_totals
        UNION ALL SELECT run_id, 'completion_tokens', completion_tokens FROM step_totals
        UNION ALL SELECT run_id, 'total_tokens', total_tokens FROM step_totals
        UNION ALL SELECT run_id, 'reasoning_tokens', reasoning_tokens FROM step_totals
    )
    WHERE v IS NOT NULL
    GROUP BY run_id
),

requested AS (
    SELECT
        run_id,
        coalesce(
            CASE WHEN json_type(provenance, '$.manifest.plan.jobs') = 'ARRAY'
                THEN json_array_length(provenance, '$.manifest.plan.jobs') END,
            planned_episodes) AS requested
    FROM runs
),

final AS (
    SELECT
        m.run_id,
        m.experiment,
        m.primary_reward,
        coalesce(q.requested, m.episodes) AS requested,
        m.episodes AS trace_files,
        m.completed,
        m.failed,
        m.scored,
        coalesce(CAST(m.completed AS DOUBLE) / nullif(coalesce(q.requested, m.episodes), 0), 0.0) AS coverage,
        m.reward_mean,
        m.reward_sem,
        m.success_rate,
        coalesce(c.reward_components, CAST(MAP {} AS MAP(VARCHAR, DOUBLE))) AS reward_components,
        m.mean_model_steps AS steps_mean,
        coalesce(m.model_steps_total, 0) AS model_steps,
        coalesce(m.protocol_errors_total, 0) AS protocol_errors,
        m.protocol_error_rate,
        coalesce(t.policy_failures, 0) AS policy_failures,
        CAST(t.policy_failures AS DOUBLE) / nullif(m.model_steps_total, 0) AS policy_failure_rate,
        m.invalid_action_rate,
        coalesce(m.invalid_actions_total, 0) AS invalid_actions,
        coalesce(m.total_actions_total, 0) AS total_actions,
        coalesce(en.termination_reasons, CAST(MAP {} AS MAP(VARCHAR, BIGINT))) AS termination_reasons,
        m.wall_time_mean_s * 1000 AS duration_ms_mean,
        coalesce(tm.tokens, CAST(MAP {} AS MAP(VARCHAR, BIGINT))) AS tokens,
        coalesce(er.errors, CAST(MAP {} AS MAP(VARCHAR, BIGINT))) AS errors
    FROM run_metrics AS m
    LEFT JOIN requested AS q ON q.run_id = m.run_id
    LEFT JOIN component_maps AS c ON c.run_id = m.run_id
    LEFT JOIN step_totals AS t ON t.run_id = m.run_id
    LEFT JOIN endings AS en ON en.run_id = m.run_id
    LEFT JOIN token_maps AS tm ON tm.run_id = m.run_id
    LEFT JOIN errors AS er ON er.run_id = m.run_id
)

SELECT * FROM final;
