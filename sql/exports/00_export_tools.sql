-- export_step_tools: the OpenAI function schemas an agent was offered at each decision, descriptions included
-- (they carry usage policy), in the order offered.
-- grain: one row per decision (model turn) of any agent in export_scope. key: (run_id, episode_id, agent_id, step_idx)
--   tools  JSON[] of {"type": "function", "function": {name, description, parameters}}: the step's
--          tool_schema_hashes in order; a source that records no per-step list offers the agent's whole tool
--          set (ordered by name). Empty list when the agent had no tools.
-- Distinct tool lists are resolved once per agent, then mapped back to the steps.
-- DuckDB-specific: list(... ORDER BY ...), unnest / generate_subscripts, JSON[].
CREATE OR REPLACE VIEW export_step_tools AS
WITH scoped_steps AS (
    SELECT run_id, episode_id, agent_id, step_idx, tool_schema_hashes
    FROM steps
    WHERE run_id IN (SELECT run_id FROM export_scope)
),

agent_tools AS (
    SELECT
        run_id, episode_id, agent_id, schema_hash, name,
        json_object('type', 'function', 'function', json_object(
            'name', name, 'description', description, 'parameters', json(parameters))) AS tool
    FROM tools
    WHERE run_id IN (SELECT run_id FROM export_scope)
),

distinct_lists AS (
    SELECT DISTINCT run_id, episode_id, agent_id, tool_schema_hashes
    FROM scoped_steps
    WHERE tool_schema_hashes IS NOT NULL
),

listed AS (
    SELECT run_id, episode_id, agent_id, tool_schema_hashes, unnest(h) AS schema_hash, generate_subscripts(h, 1) AS pos
    FROM (SELECT *, CAST(json(tool_schema_hashes) AS VARCHAR[]) AS h FROM distinct_lists)
),

per_list AS (
    SELECT l.run_id, l.episode_id, l.agent_id, l.tool_schema_hashes, list(t.tool ORDER BY l.pos) AS tools
    FROM listed AS l
    JOIN agent_tools AS t
        ON t.run_id = l.run_id AND t.episode_id = l.episode_id AND t.agent_id = l.agent_id
        AND t.schema_hash = l.schema_hash
    GROUP BY l.run_id, l.episode_id, l.agent_id, l.tool_schema_hashes
),

per_agent AS (
    SELECT run_id, episode_id, agent_id, list(tool ORDER BY name, schema_hash) AS tools
    FROM agent_tools
    GROUP BY run_id, episode_id, agent_id
),

final AS (
    SELECT
        s.run_id, s.episode_id, s.agent_id, s.step_idx,
        coalesce(l.tools, a.tools, CAST([] AS JSON[])) AS tools
    FROM scoped_steps AS s
    LEFT JOIN per_list AS l
        ON l.run_id = s.run_id AND l.episode_id = s.episode_id AND l.agent_id = s.agent_id
        AND l.tool_schema_hashes = s.tool_schema_hashes
    LEFT JOIN per_agent AS a
        ON a.run_id = s.run_id AND a.episode_id = s.episode_id AND a.agent_id = s.agent_id
        AND s.tool_schema_hashes IS NULL
)

SELECT * FROM final;
