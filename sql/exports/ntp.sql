-- export: ntp
-- grain: one row per agent trajectory (main agents and sub-agents are separate documents)
-- trl: language modeling (text)
-- sample: text
-- filters: status, reward, r_success, success, import_fidelity, source_format, agent_role, depth, est_tokens, split, experiment, task_id
-- params: export_include_reasoning, export_include_persona
-- description: one agent trajectory as a plain-text trace document (tools, task, actions, observations, outcome) for continued pretraining
-- The trace format (docs/export.md, "ntp trace format"):
--   <trace source="S" episode="E" agent="A" role="R">
--   ## tools              one "- name: description" line + "  parameters: {json}" per offered tool name
--                        (export_agent_tools: a name offered with several schemas once, merged)
--   ## system | ## user   each prefix message (system prompt, task)
--   ## turn N            the assistant text; "thinking: ..." only with --include-reasoning;
--                        one "call NAME {arguments json}" line per tool call
--   ## tool | ## user     what answered the turn
--   ## outcome            status=..., reward=..., success=...
--   </trace>
-- Sections are separated by a blank line. Every selected trajectory is a document (no default success filter:
-- continued pretraining reads failures too; pass --where success to keep successes).
-- DuckDB-specific: JSON path operators, lambdas, string_agg(... ORDER BY ...).
CREATE OR REPLACE VIEW export_ntp AS
WITH rendered AS (
    SELECT
        run_id, episode_id, agent_id, ord, est_tokens,
        '## ' || CASE WHEN part = 'history' AND role = 'assistant' THEN 'turn ' || CAST(from_step AS VARCHAR)
                      ELSE role END || chr(10)
        || CASE WHEN message ->> 'reasoning_content' IS NOT NULL
                THEN 'thinking: ' || (message ->> 'reasoning_content') || chr(10) ELSE '' END
        || coalesce(message ->> 'content', '')
        || coalesce(chr(10) || array_to_string(list_transform(CAST(message -> 'tool_calls' AS JSON[]),
               lambda x: 'call ' || (x -> 'function' ->> 'name') || ' ' || CAST(x -> 'function' -> 'arguments' AS VARCHAR)),
               chr(10)), '') AS block
    FROM export_messages
),

doc_body AS (
    SELECT run_id, episode_id, agent_id, string_agg(block, chr(10) || chr(10) ORDER BY ord) AS body,
           sum(est_tokens) AS est_tokens
    FROM rendered
    GROUP BY run_id, episode_id, agent_id
),

tool_lines AS (
    SELECT run_id, episode_id, agent_id,
           string_agg('- ' || name || ': ' || coalesce(description, '') || chr(10) || '  parameters: ' || coalesce(parameters, '{}'),
                      chr(10) ORDER BY name) AS text
    FROM export_agent_tools  -- a name once, its schemas merged (docs/export.md, "Tool lists")
    GROUP BY run_id, episode_id, agent_id
)

SELECT
    md5(b.run_id || '/' || b.episode_id || '/' || b.agent_id || ':ntp') AS sample_id,
    '<trace source="' || coalesce(e.source_format, '') || '" episode="' || b.episode_id || '" agent="' || b.agent_id
        || '" role="' || coalesce(a.agent_role, '') || '">' || chr(10)
        || CASE WHEN t.text IS NOT NULL THEN '## tools' || chr(10) || t.text || chr(10) || chr(10) ELSE '' END
        || b.body || chr(10) || chr(10)
        || '## outcome' || chr(10) || 'status=' || coalesce(e.status, 'unknown')
        || ' reward=' || coalesce(CAST(e.reward AS VARCHAR), 'none')
        || ' success=' || CASE WHEN e.success THEN 'true' ELSE 'false' END || chr(10)
        || '</trace>' || chr(10) AS text,
    b.run_id, b.episode_id, e.task_id, b.agent_id, a.agent_role, a.depth,
    e.status, e.reward, e.r_success, e.success, e.import_fidelity, e.source_format, e.split, e.experiment,
    CAST(b.est_tokens AS BIGINT) AS est_tokens
FROM doc_body AS b
JOIN export_episodes AS e ON e.run_id = b.run_id AND e.episode_id = b.episode_id
JOIN export_agents AS a ON a.run_id = b.run_id AND a.episode_id = b.episode_id AND a.agent_id = b.agent_id
LEFT JOIN tool_lines AS t ON t.run_id = b.run_id AND t.episode_id = b.episode_id AND t.agent_id = b.agent_id;
