-- report_runs: the runs a report covers ($run_ids, in order) with their kind: 'coding' for an ingested run none of
-- whose episodes has a reward (coding-agent sessions: Claude Code, OpenAI-messages, ATIF ...), 'rollout' for every
-- other (runner runs and rewarded ingests, failed runs included).
-- grain: one row per selected run. key: run_id
WITH picked AS (
    SELECT CAST(unnest($run_ids) AS VARCHAR) AS run_id, CAST(generate_subscripts($run_ids, 1) AS INTEGER) AS pos
),

rewarded AS (
    SELECT run_id, count(reward) AS rewards FROM episodes GROUP BY run_id
)

SELECT
    p.run_id,
    p.pos,
    CASE
        WHEN coalesce(r.source_format, '') <> 'shopsim-wh-runner' AND coalesce(w.rewards, 0) = 0 THEN 'coding'
        ELSE 'rollout'
    END AS kind
FROM picked AS p
JOIN runs AS r ON r.run_id = p.run_id
LEFT JOIN rewarded AS w ON w.run_id = p.run_id
ORDER BY p.pos;
