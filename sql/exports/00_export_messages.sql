-- export_messages: every agent's conversation as the exports rebuild contexts from it, for all agents in scope
-- at once (the set-based form of ir_context_messages + ir_render: no per-agent macro call).
-- grain: one row per message of an agent (global prefix and turns). key: (run_id, episode_id, agent_id, ord)
--   part       'prefix' (before the agent's first turn) or 'history' (a turn's assistant message and what
--              answered it); from_step names the turn (NULL in the prefix)
--   message    the OpenAI message as JSON ({role, content[, tool_calls][, tool_call_id][, name]
--              [, reasoning_content]}), tool-call arguments as objects (export_tool_calls)
--   est_tokens the documented estimate (est_tokens_of) over the stored message, before privacy filtering, so
--              the turns a budget keeps do not depend on the privacy flags
-- Source, as ir_context_messages: the recorded `messages` of an agent that has them (runner episodes, v4,
-- OpenAI-messages), split into turns by steps.prompt_msg_count; otherwise rendered from the IR as ir_render
-- does, with the task as the prefix (episode instruction for `main`, the delegating call's arguments for a
-- sub-agent).
-- Roles: the four chat templates know. OpenAI's 'developer' (the newer name of 'system') is written as 'system';
-- any other role a source recorded (agent_multi_turn's 'observation' runtime notes) as 'user', where the model
-- read it.
-- Privacy: reasoning_content only when getvariable('export_include_reasoning'); the persona section of a
-- system prompt (export_strip_persona) only when getvariable('export_include_persona').
-- DuckDB-specific: getvariable, macros of 00_export_macros.sql.
CREATE OR REPLACE VIEW export_messages AS
WITH scoped_steps AS (
    SELECT run_id, episode_id, agent_id, step_idx, prompt_msg_count, content, policy_failure
    FROM steps
    WHERE run_id IN (SELECT run_id FROM export_scope)
),

recorded_agents AS (
    SELECT run_id, episode_id, agent_id
    FROM messages
    WHERE run_id IN (SELECT run_id FROM export_scope)
    GROUP BY run_id, episode_id, agent_id
),

agent_mode AS (
    SELECT
        s.run_id, s.episode_id, s.agent_id,
        min(s.prompt_msg_count) AS prefix_end,
        bool_or(r.agent_id IS NOT NULL) AND min(s.prompt_msg_count) IS NOT NULL AS recorded
    FROM scoped_steps AS s
    LEFT JOIN recorded_agents AS r
        ON r.run_id = s.run_id AND r.episode_id = s.episode_id AND r.agent_id = s.agent_id
    GROUP BY s.run_id, s.episode_id, s.agent_id
),

spans AS (  -- recorded messages [lo, hi) belong to the turn step_idx
    SELECT
        run_id, episode_id, agent_id, step_idx, prompt_msg_count AS lo,
        lead(prompt_msg_count) OVER (PARTITION BY run_id, episode_id, agent_id ORDER BY step_idx) AS hi
    FROM scoped_steps
),

from_messages AS (
    SELECT
        m.run_id, m.episode_id, m.agent_id,
        CAST(m.msg_idx AS BIGINT) AS ord,
        CASE WHEN m.msg_idx < d.prefix_end THEN 'prefix' ELSE 'history' END AS part,
        CASE WHEN m.msg_idx < d.prefix_end THEN NULL ELSE sp.step_idx END AS from_step,
        m.role, m.content, m.reasoning_content, m.tool_calls, m.tool_call_id, m.name
    FROM messages AS m
    JOIN agent_mode AS d
        ON d.run_id = m.run_id AND d.episode_id = m.episode_id AND d.agent_id = m.agent_id AND d.recorded
    LEFT JOIN spans AS sp
        ON sp.run_id = m.run_id AND sp.episode_id = m.episode_id AND sp.agent_id = m.agent_id
        AND m.msg_idx >= sp.lo AND (sp.hi IS NULL OR m.msg_idx < sp.hi)
),

rendered_agents AS (
    SELECT run_id, episode_id, agent_id FROM agent_mode WHERE NOT recorded
),

task_prefix AS (  -- the task as the agent received it
    SELECT
        d.run_id, d.episode_id, d.agent_id,
        CAST(-1 AS BIGINT) AS ord, 'prefix' AS part, CAST(NULL AS INTEGER) AS from_step, 'user' AS role,
        CASE WHEN d.agent_id = 'main' THEN e.instruction ELSE c.arguments END AS content,
        CAST(NULL AS VARCHAR) AS reasoning_content, CAST(NULL AS VARCHAR) AS tool_calls,
        CAST(NULL AS VARCHAR) AS tool_call_id, CAST(NULL AS VARCHAR) AS name
    FROM rendered_agents AS d
    LEFT JOIN episodes AS e ON e.run_id = d.run_id AND e.episode_id = d.episode_id
    LEFT JOIN agents AS g ON g.run_id = d.run_id AND g.episode_id = d.episode_id AND g.agent_id = d.agent_id
    LEFT JOIN (
        SELECT run_id, episode_id, call_id, max(arguments) AS arguments
        FROM actions
        WHERE run_id IN (SELECT run_id FROM export_scope) AND call_id IS NOT NULL
        GROUP BY run_id, episode_id, call_id
    ) AS c ON c.run_id = g.run_id AND c.episode_id = g.episode_id AND c.call_id = g.spawned_by_call_id
),

calls AS (
    SELECT a.run_id, a.episode_id, a.agent_id, a.step_idx, a.call_idx, a.call_id, a.tool_name, a.arguments, a.action_type
    FROM actions AS a
    SEMI JOIN rendered_agents AS d ON d.run_id = a.run_id AND d.episode_id = a.episode_id AND d.agent_id = a.agent_id
),

rendered_tool_calls AS (  -- the same text ir_render builds, so est_tokens agree with ir_context
    SELECT
        run_id, episode_id, agent_id, step_idx,
        '[' || string_agg(
            CAST(json_object(
                'id', call_id, 'type', 'function',
                'function', json_object('name', tool_name, 'arguments', arguments)) AS VARCHAR),
            ',' ORDER BY call_idx) || ']' AS tool_calls
    FROM calls
    WHERE call_id IS NOT NULL AND tool_name IS NOT NULL
    GROUP BY run_id, episode_id, agent_id, step_idx
),

rendered_assistant AS (
    SELECT
        t.run_id, t.episode_id, t.agent_id,
        CAST(t.step_idx AS BIGINT) * 1000000 AS ord, 'history' AS part, t.step_idx AS from_step, 'assistant' AS role,
        t.content, CAST(NULL AS VARCHAR) AS reasoning_content, tc.tool_calls, CAST(NULL AS VARCHAR) AS tool_call_id,
        CAST(NULL AS VARCHAR) AS name
    FROM scoped_steps AS t
    SEMI JOIN rendered_agents AS d ON d.run_id = t.run_id AND d.episode_id = t.episode_id AND d.agent_id = t.agent_id
    LEFT JOIN rendered_tool_calls AS tc
        ON tc.run_id = t.run_id AND tc.episode_id = t.episode_id AND tc.agent_id = t.agent_id AND tc.step_idx = t.step_idx
    WHERE t.policy_failure IS NULL AND (tc.tool_calls IS NOT NULL OR trim(coalesce(t.content, '')) <> '')
),

rendered_answers AS (
    SELECT
        o.run_id, o.episode_id, o.agent_id,
        CAST(o.step_idx AS BIGINT) * 1000000 + CASE
            WHEN o.observation_type = 'hook_context' THEN 100000
            WHEN c.call_idx IS NULL THEN 50000
            ELSE 1 + c.call_idx
        END AS ord,
        'history' AS part, o.step_idx AS from_step,
        CASE WHEN c.call_idx IS NOT NULL AND o.call_id IS NOT NULL THEN 'tool' ELSE 'user' END AS role,
        o.content, CAST(NULL AS VARCHAR) AS reasoning_content, CAST(NULL AS VARCHAR) AS tool_calls,
        CASE WHEN c.call_idx IS NOT NULL THEN o.call_id END AS tool_call_id, CAST(NULL AS VARCHAR) AS name
    FROM observations AS o
    SEMI JOIN rendered_agents AS d ON d.run_id = o.run_id AND d.episode_id = o.episode_id AND d.agent_id = o.agent_id
    LEFT JOIN calls AS c
        ON c.run_id = o.run_id AND c.episode_id = o.episode_id AND c.agent_id = o.agent_id AND c.step_idx = o.step_idx
        AND c.call_id IS NOT DISTINCT FROM o.call_id AND coalesce(o.observation_type, '') <> 'hook_context'
    WHERE coalesce(c.action_type, '') <> 'terminate'
),

all_messages AS (
    SELECT * FROM from_messages
    UNION ALL
    SELECT * FROM task_prefix
    UNION ALL
    SELECT * FROM rendered_assistant
    UNION ALL
    SELECT * FROM rendered_answers
),

final AS (
    SELECT
        run_id, episode_id, agent_id, ord, part, from_step, role,
        export_message(
            CASE WHEN role = 'developer' THEN 'system'
                 WHEN role IN ('system', 'user', 'assistant', 'tool') THEN role
                 ELSE 'user' END,
            CASE
                -- a turn with neither text nor a call (a protocol error's empty answer): empty text, not null,
                -- so that every chat template renders it
                WHEN content IS NULL AND tool_calls IS NULL AND role = 'assistant' THEN ''
                WHEN coalesce(getvariable('export_include_persona'), false) OR content NOT LIKE '%用户个人文档：%'
                    THEN content
                ELSE export_strip_persona(content)
            END,
            CASE WHEN coalesce(getvariable('export_include_reasoning'), false) THEN reasoning_content END,
            tool_calls, tool_call_id, name) AS message,
        est_tokens_of(content, tool_calls, reasoning_content) AS est_tokens
    FROM all_messages
)

SELECT * FROM final;
