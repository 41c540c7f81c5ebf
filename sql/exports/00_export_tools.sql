-- export_agent_tools: the one schema per tool name an agent was offered over its trajectory: what the kinds that
-- train on a whole trajectory (sft-trajectory, ntp, prm, preference at trajectory level) list, and what a step
-- of a source that records no per-step list was offered.
-- grain: one row per (agent, tool name) in export_scope. key: (run_id, episode_id, agent_id, name)
--   schema_hash, description  of the first-offered schema of the name; parameters its JSON text, merged (below)
--   tool   {"type": "function", "function": {name, description, parameters}}
-- Merge rule (docs/export.md, "Tool lists"): a name offered with several schemas (ShopSimRL's `click`, whose
-- `value` enum lists the page's clickables, one schema per page) gets ONE: its first-offered schema (earliest
-- step, then position in that step's list; by schema_hash for a source without per-step lists) with each
-- top-level property's string enum replaced by the union of that property's string enums over every schema of
-- the name, values in order of first offer (schema, then position). A chat template renders a tool per schema:
-- four `click`s with one name is a malformed tool list, and any single page's enum leaves out the other pages'
-- clicks. Other differences between the schemas (descriptions, other keys) keep the first-offered schema's.
-- The enum text is replaced in the stored parameters text (as the engine spells the array: our writers' compact
-- JSON), so the rest of the schema keeps its bytes; deterministic, hence byte-reproducible exports.
-- DuckDB-specific: unnest / generate_subscripts, json_keys, list_reduce, lambdas, JSON[].
CREATE OR REPLACE VIEW export_agent_tools AS
WITH scoped_tools AS (
    SELECT run_id, episode_id, agent_id, schema_hash, name, description, parameters
    FROM tools
    WHERE run_id IN (SELECT run_id FROM export_scope)
),

lists AS (  -- each distinct per-step list of an agent, with the first step that offered it
    SELECT run_id, episode_id, agent_id, tool_schema_hashes, min(step_idx) AS first_step
    FROM steps
    WHERE run_id IN (SELECT run_id FROM export_scope) AND tool_schema_hashes IS NOT NULL
    GROUP BY run_id, episode_id, agent_id, tool_schema_hashes
),

listed AS (
    SELECT run_id, episode_id, agent_id, first_step, unnest(h) AS schema_hash, generate_subscripts(h, 1) AS pos
    FROM (SELECT *, CAST(json(tool_schema_hashes) AS VARCHAR[]) AS h FROM lists)
),

first_offer AS (  -- each schema's first offer: (step, position in its list)
    SELECT * FROM (
        SELECT run_id, episode_id, agent_id, schema_hash, first_step, pos,
               row_number() OVER (PARTITION BY run_id, episode_id, agent_id, schema_hash ORDER BY first_step, pos) AS rn
        FROM listed
    ) AS o
    WHERE rn = 1
),

variants AS (  -- the schemas of each name, numbered in order of first offer (1 = the first offered)
    SELECT
        t.run_id, t.episode_id, t.agent_id, t.name, t.schema_hash, t.description, t.parameters,
        row_number() OVER (PARTITION BY t.run_id, t.episode_id, t.agent_id, t.name
                           ORDER BY coalesce(o.first_step, 2147483647), coalesce(o.pos, 2147483647), t.schema_hash)
            AS variant,
        count(*) OVER (PARTITION BY t.run_id, t.episode_id, t.agent_id, t.name) AS n_variants
    FROM scoped_tools AS t
    LEFT JOIN first_offer AS o
        ON o.run_id = t.run_id AND o.episode_id = t.episode_id AND o.agent_id = t.agent_id
        AND o.schema_hash = t.schema_hash
),

props AS (  -- the top-level properties of the schemas of names offered with more than one schema
    SELECT run_id, episode_id, agent_id, name, variant, unnest(json_keys(json_extract(parameters, '$.properties'))) AS prop,
           parameters
    FROM variants
    WHERE n_variants > 1
),

enums AS (
    SELECT run_id, episode_id, agent_id, name, variant, prop,
           CAST(json_extract(parameters, '$.properties."' || prop || '".enum') AS VARCHAR) AS enum_text
    FROM props
),

string_enums AS (  -- the enums that are lists of strings (their text is the strings' JSON list)
    SELECT * FROM (
        SELECT *, CASE WHEN json_type(enum_text) = 'ARRAY' THEN CAST(json(enum_text) AS VARCHAR[]) END AS h
        FROM enums
    ) AS e
    WHERE CAST(to_json(h) AS VARCHAR) = enum_text
),

enum_values AS (
    SELECT run_id, episode_id, agent_id, name, prop, variant, unnest(h) AS value, generate_subscripts(h, 1) AS pos
    FROM string_enums
),

unions AS (  -- per (name, property): every value once, in order of first offer
    SELECT run_id, episode_id, agent_id, name, prop, CAST(to_json(list(value ORDER BY variant, pos)) AS VARCHAR) AS merged
    FROM (
        SELECT *, row_number() OVER (PARTITION BY run_id, episode_id, agent_id, name, prop, value
                                     ORDER BY variant, pos) AS rn
        FROM enum_values
    ) AS v
    WHERE rn = 1
    GROUP BY run_id, episode_id, agent_id, name, prop
),

edits AS (  -- the first-offered schema's enums to replace with the unions
    SELECT b.run_id, b.episode_id, b.agent_id, b.name,
           list({'old': '"enum":' || b.enum_text, 'new': '"enum":' || u.merged} ORDER BY b.prop) AS edits
    FROM string_enums AS b
    JOIN unions AS u
        ON u.run_id = b.run_id AND u.episode_id = b.episode_id AND u.agent_id = b.agent_id AND u.name = b.name
        AND u.prop = b.prop
    WHERE b.variant = 1 AND u.merged <> b.enum_text
    GROUP BY b.run_id, b.episode_id, b.agent_id, b.name
),

merged AS (
    SELECT
        v.run_id, v.episode_id, v.agent_id, v.name, v.schema_hash, v.description,
        CASE WHEN e.edits IS NULL THEN v.parameters
             ELSE list_reduce(e.edits, lambda acc, x: replace(acc, x.old, x.new), v.parameters) END AS parameters
    FROM variants AS v
    LEFT JOIN edits AS e
        ON e.run_id = v.run_id AND e.episode_id = v.episode_id AND e.agent_id = v.agent_id AND e.name = v.name
    WHERE v.variant = 1
)

SELECT
    run_id, episode_id, agent_id, name, schema_hash, description, parameters,
    json_object('type', 'function', 'function', json_object(
        'name', name, 'description', description, 'parameters', json(parameters))) AS tool
FROM merged;

-- export_step_tools: the OpenAI function schemas an agent was offered at each decision, descriptions included
-- (they carry usage policy), in the order offered: the schema of the step being trained on.
-- grain: one row per decision (model turn) of any agent in export_scope. key: (run_id, episode_id, agent_id, step_idx)
--   tools  JSON[] of {"type": "function", "function": {name, description, parameters}}: the step's
--          tool_schema_hashes in order, a name once (a list naming a tool twice keeps its first schema); a source
--          that records no per-step list offers the agent's tools of export_agent_tools (one schema per name,
--          merged, by name). Empty list when the agent had no tools.
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

named AS (  -- the list's schemas with their names; a name's first schema in the list is kept
    SELECT * FROM (
        SELECT l.run_id, l.episode_id, l.agent_id, l.tool_schema_hashes, l.pos, t.tool,
               row_number() OVER (PARTITION BY l.run_id, l.episode_id, l.agent_id, l.tool_schema_hashes, t.name
                                  ORDER BY l.pos) AS rn
        FROM listed AS l
        JOIN agent_tools AS t
            ON t.run_id = l.run_id AND t.episode_id = l.episode_id AND t.agent_id = l.agent_id
            AND t.schema_hash = l.schema_hash
    ) AS n
    WHERE rn = 1
),

per_list AS (
    SELECT run_id, episode_id, agent_id, tool_schema_hashes, list(tool ORDER BY pos) AS tools
    FROM named
    GROUP BY run_id, episode_id, agent_id, tool_schema_hashes
),

per_agent AS (
    SELECT run_id, episode_id, agent_id, list(tool ORDER BY name) AS tools
    FROM export_agent_tools
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
