-- export: trl-grpo
-- grain: one row per (task, split) prompt of a shop environment: the episodes of a task collapse into one row (one per distinct prompt or tool list)
-- trl: conversational prompt-only (GRPO; tools as JSON text)
-- sample: prompt, tools, task_id, split, environment, environment_version, split_manifest_hash, primary_reward
-- filters: split, task_id, source_format, experiment, environment_version
-- params: export_include_persona
-- description: a TRL GRPO prompt dataset: the shop task's starting prompt, the tools offered with it as a JSON string (TRL json.loads a string `tools`), and the columns a reward function or environment receives as keyword arguments (task_id, split, environment and its identity)
-- Columns (docs/export_rl.md, "TRL GRPO prompts")
--   prompt        STRUCT(role VARCHAR, content VARCHAR)[]: system prompt and first user message as sent
--                 (export_task_prompts; persona only with --include-persona)
--   tools         VARCHAR: JSON text of the tools offered with that prompt (the first decision's list, in the
--                 order offered, a name once): `maybe_apply_chat_template(row, tok, tools=json.loads(row["tools"]))`
--                 renders the prompt the agent saw
--   task_id, split                       the task to reset the environment to
--   environment   'shopsimulator': GRPOTrainer(environment_factory={"shopsimulator": ...}) selects by it, and a
--                 single environment_factory gets it (with every other column) in reset(**row)
--   environment_version, split_manifest_hash, primary_reward   the environment identity (runs)
--   lineage: sample_id, run_id, episode_id (the episode whose row was kept), source_format, experiment
-- DuckDB-specific: to_json over JSON[].
CREATE OR REPLACE VIEW export_trl_grpo AS
SELECT
    md5(run_id || '/' || episode_id || ':trl-grpo') AS sample_id,
    prompt,
    CAST(to_json(tools) AS VARCHAR) AS tools,
    task_id,
    split,
    env.environment AS environment,
    env.environment_version AS environment_version,
    env.split_manifest_hash AS split_manifest_hash,
    env.primary_reward AS primary_reward,
    run_id, episode_id, source_format, experiment
FROM export_task_prompts;
