-- ir_context_json(run_id, episode_id, agent_id, step_idx, k): ir_context as one OpenAI message list.
-- grain: one row. columns: messages (JSON array of {role, content[, reasoning_content][, tool_calls]
-- [, tool_call_id][, name]}), n_messages, est_tokens.
-- tool_calls is embedded as JSON (not as a string); keys with NULL values are left out.
-- DuckDB-specific: table macro, list(... ORDER BY ...) / to_json.
CREATE OR REPLACE MACRO ir_context_json(p_run_id, p_episode_id, p_agent_id, p_step_idx, k) AS TABLE
WITH ctx AS (
    SELECT * FROM ir_context(p_run_id, p_episode_id, p_agent_id, p_step_idx, k)
),

as_json AS (
    SELECT
        position,
        est_tokens,
        -- the object assembled as text (to_json escapes each value), in json_merge_patch's key order: the same
        -- SQL on Spark, which has no JSON merge
        CAST('{"role":' || coalesce(CAST(to_json(role) AS VARCHAR), 'null')
             || ',"content":' || coalesce(CAST(to_json(content) AS VARCHAR), 'null')
             || CASE WHEN reasoning_content IS NOT NULL
                     THEN ',"reasoning_content":' || CAST(to_json(reasoning_content) AS VARCHAR) ELSE '' END
             || CASE WHEN tool_calls IS NOT NULL THEN ',"tool_calls":' || CAST(json(tool_calls) AS VARCHAR) ELSE '' END
             || CASE WHEN tool_call_id IS NOT NULL
                     THEN ',"tool_call_id":' || CAST(to_json(tool_call_id) AS VARCHAR) ELSE '' END
             || CASE WHEN name IS NOT NULL THEN ',"name":' || CAST(to_json(name) AS VARCHAR) ELSE '' END
             || '}' AS JSON) AS message
    FROM ctx
),

final AS (
    SELECT
        coalesce(CAST(to_json(list(message ORDER BY position)) AS JSON), json('[]')) AS messages,
        count(*) AS n_messages,
        coalesce(sum(est_tokens), 0) AS est_tokens
    FROM as_json
)

SELECT * FROM final;
