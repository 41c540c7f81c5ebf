-- coding_tools: tool usage of the selected coding sessions (report_runs kind 'coding'): calls per tool (answers,
-- which carry no tool, left out) and the calls whose tool_result observation reported an error (is_error).
-- error_rate = errors / calls.
-- grain: one row per (run_id, tool_name). key: (run_id, tool_name)
WITH calls AS (
    SELECT a.run_id, a.tool_name, a.tool_type, o.is_error AND o.observation_type = 'tool_result' AS failed
    FROM actions AS a
    LEFT JOIN observations AS o
        ON o.run_id = a.run_id AND o.episode_id = a.episode_id AND o.agent_id = a.agent_id
        AND o.step_idx = a.step_idx AND o.call_id = a.call_id
    WHERE a.run_id IN (SELECT run_id FROM report_runs WHERE kind = 'coding') AND a.tool_name IS NOT NULL
)

SELECT
    run_id,
    tool_name,
    min(tool_type) AS tool_type,
    count(*) AS calls,
    count(*) FILTER (WHERE failed) AS errors,
    CAST(count(*) FILTER (WHERE failed) AS DOUBLE) / count(*) AS error_rate
FROM calls
GROUP BY run_id, tool_name
ORDER BY run_id, calls DESC, tool_name;
