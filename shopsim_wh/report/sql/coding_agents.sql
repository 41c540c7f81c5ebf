-- coding_agents: the sub-agents (ir_agents, depth > 0) of one domain's runs ($domain) by series
-- (report_runs.grp) and role: how many, the model steps and tokens they took, and the delegate calls labelled
-- subagent_failure (report_labels) in the series.
-- grain: one row per (grp, agent_role). key: (grp, agent_role)
WITH sub AS (
    SELECT k.grp, k.grp_pos, coalesce(a.agent_role, 'unknown') AS agent_role, a.n_steps, a.tokens_in, a.tokens_out
    FROM ir_agents AS a
    JOIN report_runs AS k ON k.run_id = a.run_id
    WHERE a.depth > 0 AND k.domain = $domain
),

failed AS (
    SELECT k.grp, count(*) AS subagent_failures
    FROM report_labels AS l
    JOIN report_runs AS k ON k.run_id = l.run_id
    WHERE l.code = 'subagent_failure' AND k.domain = $domain
    GROUP BY k.grp
)

SELECT
    s.grp,
    s.agent_role,
    count(*) AS agents,
    sum(s.n_steps) AS steps,
    sum(coalesce(s.tokens_in, 0) + coalesce(s.tokens_out, 0)) AS tokens,
    coalesce(min(f.subagent_failures), 0) AS series_subagent_failures
FROM sub AS s
LEFT JOIN failed AS f ON f.grp = s.grp
GROUP BY s.grp, s.agent_role
ORDER BY min(s.grp_pos), s.grp, agents DESC, s.agent_role;
