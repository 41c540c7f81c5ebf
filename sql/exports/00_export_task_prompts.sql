-- export_task_prompts: the prompt each shop task starts from, for the RL prompt kinds (verl-rl, trl-grpo): the
-- chat messages the agent was sent before its first turn (system prompt and first user message, as the runner
-- or the trace recorded them) with the environment that can replay the task.
-- grain: one row per episode (last attempt) of a shop run in export_scope whose main agent recorded a prompt
-- ending in a user message. key: (run_id, episode_id). The kinds collapse the episodes of one task: their sample
-- columns hold nothing of the episode, so the exporter's exact-duplicate removal keeps one row per (task, split,
-- prompt, environment).
--   prompt        STRUCT(role VARCHAR, content VARCHAR)[]: export_messages' prefix of the main agent (the persona
--                 section of the system prompt only with export_include_persona; no reasoning in a prefix)
--   tools         JSON[] the tools offered with that prompt: the first decision's list (export_step_tools,
--                 step 0), in the order offered, a name once
--   env           STRUCT(environment, environment_version, split_manifest_hash, primary_reward): what can replay
--                 and score the task; environment = 'shopsimulator' (a ShopSimulator-compatible shop: shop_env,
--                 pi-slime, the embedded server), the rest from `runs` (environment_version from the server's
--                 healthz / reset answer, split_manifest_hash of the frozen task split, NULL for ingested v4 runs)
--   ground_truth  VARCHAR: env, task_id and split as compact JSON with sorted keys, a key whose value is unknown
--                 (NULL) left out; what a rule reward asks the environment about. Never the private goal: the environment holds it and scores the episode
--                 itself (the warehouse never stores it: docs/export_rl.md, "verl RL parquet")
-- Shop runs: runs whose reward is ShopSimulator's (runs.primary_reward r_strict for shop_env and the embedded
-- server, r_loose for pi-slime) and episodes with a task id. Other sources (coding-agent sessions, tau-bench) have
-- no environment here to replay their first turn in, so they give no row.
-- DuckDB-specific: list(... ORDER BY ...), struct literals, to_json, json_extract_string, concat_ws.
CREATE OR REPLACE VIEW export_task_prompts AS
WITH shop_runs AS (
    SELECT run_id, environment_version, split_manifest_hash, primary_reward
    FROM runs
    WHERE run_id IN (SELECT run_id FROM export_scope) AND primary_reward IN ('r_strict', 'r_loose')
),

shop_episodes AS (
    SELECT
        e.run_id, e.episode_id, e.task_id, e.split, e.experiment, e.source_format, e.status,
        {'environment': 'shopsimulator', 'environment_version': r.environment_version,
         'split_manifest_hash': r.split_manifest_hash, 'primary_reward': r.primary_reward} AS env
    FROM export_episodes AS e
    JOIN shop_runs AS r ON r.run_id = e.run_id
    WHERE e.task_id IS NOT NULL
),

prefix AS (
    SELECT
        run_id, episode_id,
        list({'role': json_extract_string(message, '$.role'), 'content': json_extract_string(message, '$.content')}
             ORDER BY ord) AS prompt
    FROM export_messages
    WHERE agent_id = 'main' AND part = 'prefix'
    GROUP BY run_id, episode_id
),

first_tools AS (
    SELECT run_id, episode_id, tools
    FROM export_step_tools
    WHERE agent_id = 'main' AND step_idx = 0
),

final AS (
    SELECT
        e.run_id, e.episode_id, e.task_id, e.split, e.experiment, e.source_format, e.status, p.prompt,
        coalesce(t.tools, CAST([] AS JSON[])) AS tools, e.env,
        '{' || concat_ws(',',  -- a key whose value is unknown is left out (as Spark's to_json does)
            '"environment":' || CAST(to_json(e.env.environment) AS VARCHAR),
            '"environment_version":' || CAST(to_json(e.env.environment_version) AS VARCHAR),
            '"primary_reward":' || CAST(to_json(e.env.primary_reward) AS VARCHAR),
            '"split":' || CAST(to_json(e.split) AS VARCHAR),
            '"split_manifest_hash":' || CAST(to_json(e.env.split_manifest_hash) AS VARCHAR),
            '"task_id":' || CAST(e.task_id AS VARCHAR)) || '}' AS ground_truth
    FROM shop_episodes AS e
    JOIN prefix AS p ON p.run_id = e.run_id AND p.episode_id = e.episode_id
    LEFT JOIN first_tools AS t ON t.run_id = e.run_id AND t.episode_id = e.episode_id
    WHERE p.prompt[-1].role = 'user'
)

SELECT * FROM final;
