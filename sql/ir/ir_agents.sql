-- ir_agents: the agent view of the Trajectory IR (seed 001 part 3 §3): who acted in an episode, under whom.
-- grain: one row per agent of an episode (final attempt)
-- key:   (run_id, trace_id, agent_id)        -- trace_id = episode_id
-- Agents that took steps but have no `agents` row (a source that records none) still appear: `main` as the
-- root (depth 0), any other id as a child of `main` (depth 1, role 'unknown').
-- Portable SQL except CREATE OR REPLACE.
CREATE OR REPLACE VIEW ir_agents AS
WITH declared AS (
    SELECT run_id, episode_id, agent_id, parent_agent_id, agent_role, agent_type, spawned_by_call_id, depth, model
    FROM agents
),

step_counts AS (
    SELECT
        run_id, episode_id, agent_id,
        count(*) AS n_steps,
        min(seq) AS first_seq,
        max(seq) AS last_seq,
        sum(tokens_in) AS tokens_in,
        sum(tokens_out) AS tokens_out
    FROM steps
    GROUP BY run_id, episode_id, agent_id
),

undeclared AS (
    SELECT
        s.run_id, s.episode_id, s.agent_id,
        CASE WHEN s.agent_id = 'main' THEN NULL ELSE 'main' END AS parent_agent_id,
        CASE WHEN s.agent_id = 'main' THEN 'main' ELSE 'unknown' END AS agent_role,
        CAST(NULL AS VARCHAR) AS agent_type,
        CAST(NULL AS VARCHAR) AS spawned_by_call_id,
        CAST(CASE WHEN s.agent_id = 'main' THEN 0 ELSE 1 END AS SMALLINT) AS depth,
        CAST(NULL AS VARCHAR) AS model
    FROM step_counts AS s
    LEFT JOIN declared AS d
        ON d.run_id = s.run_id AND d.episode_id = s.episode_id AND d.agent_id = s.agent_id
    WHERE d.agent_id IS NULL
),

all_agents AS (
    SELECT * FROM declared
    UNION ALL
    SELECT * FROM undeclared
),

children AS (
    SELECT run_id, episode_id, parent_agent_id AS agent_id, count(*) AS n_children
    FROM all_agents
    WHERE parent_agent_id IS NOT NULL
    GROUP BY run_id, episode_id, parent_agent_id
),

final AS (
    SELECT
        a.run_id,
        a.episode_id AS trace_id,
        a.episode_id,
        a.agent_id,
        a.parent_agent_id,
        a.agent_role,
        a.agent_type,
        a.depth,
        a.spawned_by_call_id,
        a.model,
        coalesce(c.n_steps, 0) AS n_steps,
        c.first_seq,
        c.last_seq,
        c.tokens_in,
        c.tokens_out,
        coalesce(ch.n_children, 0) AS n_children
    FROM all_agents AS a
    LEFT JOIN step_counts AS c
        ON c.run_id = a.run_id AND c.episode_id = a.episode_id AND c.agent_id = a.agent_id
    LEFT JOIN children AS ch
        ON ch.run_id = a.run_id AND ch.episode_id = a.episode_id AND ch.agent_id = a.agent_id
)

SELECT * FROM final;
