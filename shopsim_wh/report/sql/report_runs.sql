-- report_runs: the runs a report covers ($run_ids, in order) with their domain and the series they are drawn in.
-- grain: one row per selected run. key: run_id
-- domain (docs/report.md, "Domains"): from runs.source_format, the one field every writer sets (the runner
-- 'shopsim-wh-runner', each ingest reader its own name; NULL, no source recorded, counts as the runner's): 'shop'
-- for $shop_sources or a run that speaks the shop observation protocol (observation_version
-- 'shopping-observation-*'), 'coding' for $coding_sources (Claude Code, agent_multi_turn), 'other' for every
-- other source (tau-bench's OpenAI messages, ATIF, ...).
-- grp: the bar a run's episodes are drawn in: the run itself ($group_by 'run'), or its checkpoint ($group_by
-- 'checkpoint', runs of one checkpoint and domain pooled; a run without a checkpoint_id stays on its own);
-- grp_pos: the position of the series' first run (charts draw series in that order); grp_runs: its runs.
WITH picked AS (
    SELECT CAST(unnest($run_ids) AS VARCHAR) AS run_id, CAST(generate_subscripts($run_ids, 1) AS INTEGER) AS pos
),

classified AS (
    SELECT
        p.run_id,
        p.pos,
        r.checkpoint_id,
        CASE
            WHEN list_contains($shop_sources, coalesce(r.source_format, 'shopsim-wh-runner'))
                OR coalesce(r.observation_version, '') LIKE 'shopping-observation-%' THEN 'shop'
            WHEN list_contains($coding_sources, r.source_format) THEN 'coding'
            ELSE 'other'
        END AS domain
    FROM picked AS p
    JOIN runs AS r ON r.run_id = p.run_id
),

grouped AS (
    SELECT
        *,
        CASE WHEN $group_by = 'checkpoint' THEN coalesce(checkpoint_id, run_id) ELSE run_id END AS grp
    FROM classified
)

SELECT
    run_id,
    pos,
    domain,
    grp,
    min(pos) OVER (PARTITION BY domain, grp) AS grp_pos,
    count(*) OVER (PARTITION BY domain, grp) AS grp_runs
FROM grouped
ORDER BY pos;
