-- coding_agents: the sub-agents of the selected coding sessions (ir_agents, depth > 0) by role: how many, the
-- model steps and tokens they took, and the delegate calls labelled subagent_failure (report_labels) per session.
-- grain: one row per (run_id, agent_role). key: (run_id, agent_role)
WITH sub AS (
    SELECT run_id, coalesce(agent_role, 'unknown') AS agent_role, n_steps, tokens_in, tokens_out
    FROM ir_agents
    WHERE depth > 0 AND run_id IN (SELECT run_id FROM report_runs WHERE kind = 'coding')
),

failed AS (
    SELECT run_id, count(*) AS subagent_failures
    FROM report_labels
    WHERE code = 'subagent_failure' AND run_id IN (SELECT run_id FROM report_runs WHERE kind = 'coding')
    GROUP BY run_id
)

SELECT
    s.run_id,
    s.agent_role,
    count(*) AS agents,
    sum(s.n_steps) AS steps,
    sum(coalesce(s.tokens_in, 0) + coalesce(s.tokens_out, 0)) AS tokens,
    coalesce(min(f.subagent_failures), 0) AS session_subagent_failures
FROM sub AS s
LEFT JOIN failed AS f ON f.run_id = s.run_id
GROUP BY s.run_id, s.agent_role
ORDER BY s.run_id, agents DESC, s.agent_role;
