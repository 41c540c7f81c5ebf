-- export: verl-rl
-- grain: one row per (task, split) prompt of a shop environment: the episodes of a task collapse into one row (one per distinct prompt: a run whose system prompt differs, e.g. with skills, gives its own)
-- trl: -
-- sample: data_source, prompt, ability, reward_model, extra_info
-- filters: split, task_id, source_format, experiment, environment_version
-- params: export_include_persona
-- description: verl's RL dataset parquet (RLHFDataset): the shop task's starting prompt, a rule reward_model naming the environment that scores it, and extra_info with verl's multi-turn tools_kwargs (create_kwargs for search and click) and interaction_kwargs
-- Columns (verl's names; docs/export_rl.md, "verl RL parquet")
--   data_source   'shopsimulator' (verl picks a reward function by it)
--   prompt        STRUCT(role VARCHAR, content VARCHAR)[]: the system prompt and the first user message (task and
--                 first page) as the runner or the trace sent them (export_task_prompts; verl's prompt_key
--                 "prompt"); persona section only with --include-persona
--   ability       'agent-shopping'
--   reward_model  STRUCT(style VARCHAR, ground_truth VARCHAR): style 'rule'; ground_truth the JSON text of the
--                 environment identity, task_id and split (export_task_prompts.ground_truth): the environment
--                 scores the rollout from its private goal, which never leaves it (nor enters the warehouse)
--   extra_info    STRUCT: split, index (= task_id, stable across exports), task_id, need_tools_kwargs (true),
--                 tools_kwargs {click, search: {create_kwargs: {environment, environment_version, split,
--                 split_manifest_hash, task_id}}} (verl's BaseTool.create(create_kwargs=...) per tool name),
--                 interaction_kwargs {name: 'shopsimulator', task_id, split, environment_version,
--                 split_manifest_hash, primary_reward} (verl's interaction registry picks the interaction by name)
--   lineage: sample_id, run_id, episode_id (the episode whose row was kept), task_id, split, source_format,
--   experiment, environment_version
-- Coding-agent sessions and other sources without a shop environment give no row (export_task_prompts).
-- DuckDB-specific: struct literals.
CREATE OR REPLACE VIEW export_verl_rl AS
WITH rows AS (
    SELECT
        p.*,
        {'environment': p.env.environment, 'environment_version': p.env.environment_version, 'split': p.split,
         'split_manifest_hash': p.env.split_manifest_hash, 'task_id': p.task_id} AS create_kwargs
    FROM export_task_prompts AS p
)

SELECT
    md5(run_id || '/' || episode_id || ':verl-rl') AS sample_id,
    'shopsimulator' AS data_source,
    prompt,
    'agent-shopping' AS ability,
    {'style': 'rule', 'ground_truth': ground_truth} AS reward_model,
    {'split': split,
     'index': task_id,
     'task_id': task_id,
     'need_tools_kwargs': true,
     'tools_kwargs': {'click': {'create_kwargs': create_kwargs}, 'search': {'create_kwargs': create_kwargs}},
     'interaction_kwargs': {'name': 'shopsimulator', 'task_id': task_id, 'split': split,
                            'environment_version': env.environment_version,
                            'split_manifest_hash': env.split_manifest_hash,
                            'primary_reward': env.primary_reward}} AS extra_info,
    run_id, episode_id, task_id, split, source_format, experiment, env.environment_version AS environment_version
FROM rows;
