-- ir_tools(run_id, episode_id, agent_id): the tool schemas offered to an agent, in OpenAI `tools` format
-- (part of the global prefix; the chat API takes them beside the messages).
-- grain: one row per distinct tool schema of the agent. key: schema_hash
-- DuckDB-specific: table macro, json_object.
CREATE OR REPLACE MACRO ir_tools(p_run_id, p_episode_id, p_agent_id) AS TABLE
WITH offered AS (
    SELECT name, description, parameters, tool_type, schema_hash
    FROM tools
    WHERE run_id = p_run_id AND episode_id = p_episode_id AND agent_id = p_agent_id
),

final AS (
    SELECT
        schema_hash,
        name,
        tool_type,
        json_object(
            'type', 'function',
            'function', json_object('name', name, 'description', description, 'parameters', json(parameters))
        ) AS tool
    FROM offered
)

SELECT * FROM final ORDER BY name, schema_hash;
