-- export: preference
-- grain: one row per preference pair: level 'trajectory' (two rollouts of a task) or 'step' (two actions from one state)
-- trl: conversational preference
-- sample: prompt, chosen, rejected, tools
-- filters: level, margin, chosen_value, rejected_value, chosen_n, rejected_n, agent_role, source_format, import_fidelity, est_tokens
-- description: preference pairs (DPO and the like): a better vs a worse rollout of the same task (trajectory level) and a better vs a worse action from the same state (step level), with the margin
-- params: export_min_margin, export_min_step_margin, export_max_pairs, export_window, export_max_tokens
-- batch: task
-- batch-episodes: 4000
-- materialize: export_rl_states, export_preference_pairs
-- decisions: export_preference_needed
--
-- Shape: TRL's conversational preference type with the shared prompt in its own column (`prompt`; TRL also
-- reads the variant that folds it into chosen/rejected): prompt JSON[] the shared messages, chosen / rejected
-- JSON[] the continuations (assistant messages, and at trajectory level the tool results between them), tools
-- JSON[] a name once: at step level the schemas offered at the chosen decision (the state, tools included, is
-- shared), at trajectory level the chosen rollout's tools over its trajectory (export_agent_tools: a name offered
-- with several schemas, ShopSimRL's per-page `click`, merged; the rejected rollout's own page values are not added).
--
-- Trajectory level (main agents of completed episodes with a reward, in scope):
--   candidates share task_id AND prefix_key (the same global prefix: system prompt with its skills, task, first
--   observation; export_rl_states), so the prompt really is shared. Within such a group, rollouts are ranked by
--   reward descending and by reward ascending (ties by run_id, episode_id); the i-th best is paired with the
--   i-th worst for i = 1, 2, ... while the margin (reward difference) is >= export_min_margin (default 0.5).
--   Every rollout appears in at most one pair per group, so a group of n rollouts gives at most n / 2 pairs,
--   capped at export_max_pairs (default 8). prompt = the prefix, chosen / rejected = the main agent's turns.
-- Step level: decisions of rated rollouts (completed, with a reward) grouped by (task_id, state_key) of
--   export_rl_states (same agent role, prefix, whole earlier conversation and tool set); each distinct action
--   (action_key) from that state has a value, the mean final reward of the rollouts that took it (mc_value over
--   mc_n rollouts). Actions are paired best-with-worst the same way (ranked by value, ties by action_key) while
--   the value difference is >= export_min_step_margin (default 0.25), at most export_max_pairs per state.
--   chosen / rejected = the assistant message of a representative decision of each action: the one of the
--   smallest (run_id, episode_id, agent_id, step_idx); prompt = the chosen representative's context
--   (export_decisions.prompt, so --window / --max-tokens apply).
-- margin = chosen_value - rejected_value (rewards at trajectory level, MC values at step level); chosen_n /
-- rejected_n = the rollouts behind each value (1 at trajectory level).
-- DuckDB-specific: getvariable, list(... ORDER BY ...), MATERIALIZED CTEs, JSON[].
-- Batches of 4000 episodes (`-- batch-episodes:`; the default is 500): binding and optimizing this view stack
-- costs ~0.5 CPU s per batch whatever its size, which at 500 episodes was half of a batch's work (measured at
-- 20,000 episodes: 91 CPU s in batches of 500, 50 in batches of 2500, byte-identical shards; peak RSS 615 / 766 MB),
-- and fewer batch folders make the base-row copy cheaper; at 100,000 episodes (bench_export_rl.py, load ~14):
-- 213 CPU s in batches of 2500 (973 MB), 167 in batches of 4000 (1,133 MB) or of 5000 (1,244 MB).
-- Built in three views so that the export framework can compute the pairs once and the contexts of their
-- decisions only: export_preference_pairs (the pairs), export_preference_needed (the decisions whose messages
-- the pairs show; `-- decisions:` above makes export_decisions compute only those), export_preference (rows).
CREATE OR REPLACE VIEW export_preference_pairs AS
WITH params AS (
    SELECT
        CAST(coalesce(getvariable('export_min_margin'), 0.5) AS DOUBLE) AS min_margin,
        CAST(coalesce(getvariable('export_min_step_margin'), 0.25) AS DOUBLE) AS min_step_margin,
        CAST(coalesce(getvariable('export_max_pairs'), 8) AS INTEGER) AS max_pairs
),

rated AS MATERIALIZED (
    SELECT * FROM export_rl_states WHERE rated
),

-- trajectory level ------------------------------------------------------------------------------------------
rollouts AS (
    SELECT
        run_id, episode_id, task_id, prefix_key, reward,
        row_number() OVER (PARTITION BY task_id, prefix_key ORDER BY reward DESC, run_id, episode_id) AS best_rank,
        row_number() OVER (PARTITION BY task_id, prefix_key ORDER BY reward ASC, run_id DESC, episode_id DESC)
            AS worst_rank
    FROM rated
    WHERE agent_id = 'main' AND t = 0
),

trajectory_pairs AS (
    SELECT
        'trajectory' AS level, c.best_rank AS pair_rank,
        c.run_id, c.episode_id, c.task_id, 'main' AS agent_id, CAST(NULL AS INTEGER) AS step_idx,
        r.run_id AS rejected_run_id, r.episode_id AS rejected_episode_id, CAST(NULL AS INTEGER) AS rejected_step_idx,
        c.reward AS chosen_value, r.reward AS rejected_value, 1 AS chosen_n, 1 AS rejected_n
    FROM rollouts AS c
    JOIN rollouts AS r
        ON r.task_id IS NOT DISTINCT FROM c.task_id AND r.prefix_key = c.prefix_key AND r.worst_rank = c.best_rank
    CROSS JOIN params AS p
    WHERE c.reward - r.reward >= p.min_margin AND c.best_rank <= p.max_pairs
),

-- step level -------------------------------------------------------------------------------------------------
actions_taken AS (
    SELECT
        task_id, state_key, action_key, any_value(agent_role) AS agent_role, any_value(mc_n) AS n,
        any_value(mc_value) AS value,
        min({'run_id': run_id, 'episode_id': episode_id, 'agent_id': agent_id, 'step_idx': step_idx}) AS rep
    FROM rated
    WHERE state_actions >= 2
    GROUP BY task_id, state_key, action_key
),

ranked_actions AS (
    SELECT
        *,
        row_number() OVER (PARTITION BY task_id, state_key ORDER BY value DESC, action_key) AS best_rank,
        row_number() OVER (PARTITION BY task_id, state_key ORDER BY value ASC, action_key DESC) AS worst_rank
    FROM actions_taken
),

step_pairs AS (
    SELECT
        'step' AS level, c.best_rank AS pair_rank,
        c.rep.run_id AS run_id, c.rep.episode_id AS episode_id, c.task_id, c.rep.agent_id AS agent_id,
        c.rep.step_idx AS step_idx,
        r.rep.run_id AS rejected_run_id, r.rep.episode_id AS rejected_episode_id, r.rep.step_idx AS rejected_step_idx,
        c.value AS chosen_value, r.value AS rejected_value, c.n AS chosen_n, r.n AS rejected_n
    FROM ranked_actions AS c
    JOIN ranked_actions AS r
        ON r.task_id IS NOT DISTINCT FROM c.task_id AND r.state_key = c.state_key AND r.worst_rank = c.best_rank
    CROSS JOIN params AS p
    WHERE c.value - r.value >= p.min_step_margin AND c.best_rank <= p.max_pairs
),

pairs AS (
    SELECT * FROM trajectory_pairs
    UNION ALL
    SELECT * FROM step_pairs
)

SELECT * FROM pairs;

-- grain: one row per decision whose messages a pair shows. key: (run_id, episode_id, agent_id, step_idx)
CREATE OR REPLACE VIEW export_preference_needed AS
SELECT run_id, episode_id, agent_id, step_idx FROM export_preference_pairs WHERE level = 'step'
UNION
SELECT rejected_run_id, rejected_episode_id, agent_id, rejected_step_idx FROM export_preference_pairs WHERE level = 'step'
UNION
SELECT run_id, episode_id, agent_id, 0 FROM export_preference_pairs WHERE level = 'trajectory';

-- messages ---------------------------------------------------------------------------------------------------
CREATE OR REPLACE VIEW export_preference AS
WITH pairs AS (
    SELECT * FROM export_preference_pairs
),

needed AS (
    SELECT * FROM export_preference_needed
),

decisions AS MATERIALIZED (
    SELECT d.*
    FROM export_decisions AS d
    SEMI JOIN needed AS n
        ON n.run_id = d.run_id AND n.episode_id = d.episode_id AND n.agent_id = d.agent_id AND n.step_idx = d.step_idx
),

trajectory_runs AS (
    SELECT DISTINCT run_id, episode_id FROM pairs WHERE level = 'trajectory'
    UNION
    SELECT DISTINCT rejected_run_id, rejected_episode_id FROM pairs WHERE level = 'trajectory'
),

conversations AS MATERIALIZED (
    SELECT
        m.run_id, m.episode_id,
        list(m.message ORDER BY m.ord) FILTER (WHERE m.part = 'prefix') AS prefix,
        list(m.message ORDER BY m.ord) FILTER (WHERE m.part = 'history') AS turns,
        CAST(sum(m.est_tokens) AS BIGINT) AS est_tokens
    FROM export_messages AS m
    SEMI JOIN trajectory_runs AS t ON t.run_id = m.run_id AND t.episode_id = m.episode_id
    WHERE m.agent_id = 'main'
    GROUP BY m.run_id, m.episode_id
),

trajectory_tools AS (  -- trajectory level: the chosen rollout's tools over its whole trajectory, a name once
    SELECT t.run_id, t.episode_id, list(t.tool ORDER BY t.name) AS tools
    FROM export_agent_tools AS t
    SEMI JOIN pairs AS p ON p.level = 'trajectory' AND p.run_id = t.run_id AND p.episode_id = t.episode_id
    WHERE t.agent_id = 'main'
    GROUP BY t.run_id, t.episode_id
),

final AS (
    SELECT
        md5('preference/' || p.level || '/' || p.run_id || '/' || p.episode_id || '/' || p.agent_id || '/'
            || coalesce(CAST(p.step_idx AS VARCHAR), '') || '/' || p.rejected_run_id || '/' || p.rejected_episode_id
            || '/' || coalesce(CAST(p.rejected_step_idx AS VARCHAR), '')) AS sample_id,
        p.level,
        p.run_id,
        p.episode_id,
        p.task_id,
        p.agent_id,
        coalesce(dc.agent_role, 'main') AS agent_role,
        p.step_idx,
        p.rejected_run_id,
        p.rejected_episode_id,
        p.rejected_step_idx,
        CASE WHEN p.level = 'step' THEN dc.prompt ELSE coalesce(cc.prefix, CAST([] AS JSON[])) END AS prompt,
        CASE WHEN p.level = 'step' THEN dc.completion ELSE coalesce(cc.turns, CAST([] AS JSON[])) END AS chosen,
        CASE WHEN p.level = 'step' THEN dr.completion ELSE coalesce(cr.turns, CAST([] AS JSON[])) END AS rejected,
        CASE WHEN p.level = 'step' THEN dc.tools ELSE coalesce(tt.tools, CAST([] AS JSON[])) END AS tools,
        p.chosen_value - p.rejected_value AS margin,
        p.chosen_value,
        p.rejected_value,
        CAST(p.chosen_n AS INTEGER) AS chosen_n,
        CAST(p.rejected_n AS INTEGER) AS rejected_n,
        CAST(p.pair_rank AS INTEGER) AS pair_rank,
        dc.source_format,
        least(dc.import_fidelity, coalesce(dr.import_fidelity, dc.import_fidelity)) AS import_fidelity,
        dc.split,
        CASE
            WHEN p.level = 'step' THEN dc.est_tokens + dr.completion_tokens
            ELSE cc.est_tokens + cr.est_tokens
        END AS est_tokens
    FROM pairs AS p
    JOIN decisions AS dc
        ON dc.run_id = p.run_id AND dc.episode_id = p.episode_id AND dc.agent_id = p.agent_id
        AND dc.step_idx = coalesce(p.step_idx, 0)
    LEFT JOIN decisions AS dr
        ON p.level = 'step' AND dr.run_id = p.rejected_run_id AND dr.episode_id = p.rejected_episode_id
        AND dr.agent_id = p.agent_id AND dr.step_idx = p.rejected_step_idx
    LEFT JOIN conversations AS cc ON p.level = 'trajectory' AND cc.run_id = p.run_id AND cc.episode_id = p.episode_id
    LEFT JOIN conversations AS cr
        ON p.level = 'trajectory' AND cr.run_id = p.rejected_run_id AND cr.episode_id = p.rejected_episode_id
    LEFT JOIN trajectory_tools AS tt ON p.level = 'trajectory' AND tt.run_id = p.run_id AND tt.episode_id = p.episode_id
)

SELECT * FROM final;
