-- coding_tools: tool usage of one domain's runs ($domain) per series (report_runs.grp): calls per tool
-- (answers, which carry no tool, left out) and the calls whose tool_result observation reported an error
-- (is_error). error_rate = errors / calls.
-- grain: one row per (grp, tool_name). key: (grp, tool_name)
WITH calls AS (
    SELECT k.grp, k.grp_pos, a.tool_name, a.tool_type, o.is_error AND o.observation_type = 'tool_result' AS failed
    FROM actions AS a
    JOIN report_runs AS k ON k.run_id = a.run_id
    LEFT JOIN observations AS o
        ON o.run_id = a.run_id AND o.episode_id = a.episode_id AND o.agent_id = a.agent_id
        AND o.step_idx = a.step_idx AND o.call_id = a.call_id
    WHERE k.domain = $domain AND a.tool_name IS NOT NULL
)

SELECT
    grp,
    tool_name,
    min(tool_type) AS tool_type,
    count(*) AS calls,
    count(*) FILTER (WHERE failed) AS errors,
    CAST(count(*) FILTER (WHERE failed) AS DOUBLE) / count(*) AS error_rate
FROM calls
GROUP BY grp, tool_name
ORDER BY min(grp_pos), grp, calls DESC, tool_name;
