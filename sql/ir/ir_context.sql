-- Context reconstruction (seed 001 part 3 §4-§5): what an agent could see when it made a decision.
--
-- ir_context_messages(run_id, episode_id, agent_id, step_idx): every message of the decision's full context
--   grain: one row per message, in the order the model received them
--   key:   position (0-based)
--   part:  'prefix'  = the global prefix: everything before the agent's first turn (system prompt with
--                      injected skills, the task, the environment's first observation);
--          'history' = the earlier turns: each turn's assistant message and the tool results / feedback /
--                      hook context that followed it; from_step names the turn.
--   Source: the recorded `messages` when the agent has them (runner episodes: exactly the request body the
--   model was sent, `msg_idx < steps.prompt_msg_count`); otherwise rendered from the IR by ir_render, with the
--   task as the prefix (the episode instruction for `main`, the delegating call's arguments for a sub-agent).
--   est_tokens: the documented token estimate, ceil(chars / 4) over content, tool_calls and reasoning_content,
--   plus 4 per message for role and framing (no tokenizer dependency; see docs/sql_cookbook.md).
--
-- ir_context(run_id, episode_id, agent_id, step_idx, k): the global prefix plus the last k action/observation
--   pairs (turns) before step_idx; k = NULL keeps every earlier turn. Same columns, positions renumbered.
-- DuckDB-specific: table macros, lead() over a range join, CTE hints.
CREATE OR REPLACE MACRO ir_context_messages(p_run_id, p_episode_id, p_agent_id, p_step_idx) AS TABLE
WITH turns AS (
    SELECT step_idx, prompt_msg_count
    FROM steps
    WHERE run_id = p_run_id AND episode_id = p_episode_id AND agent_id = p_agent_id
),

target AS (
    SELECT max(prompt_msg_count) AS end_msg, count(*) AS n
    FROM turns
    WHERE step_idx = p_step_idx
),

spans AS (  -- messages [lo, hi) belong to the turn step_idx
    SELECT step_idx, prompt_msg_count AS lo, lead(prompt_msg_count) OVER (ORDER BY step_idx) AS hi
    FROM turns
),

prefix_end AS (
    SELECT min(prompt_msg_count) AS n FROM turns
),

recorded AS (
    SELECT msg_idx, role, content, reasoning_content, tool_calls, tool_call_id, name
    FROM messages
    WHERE run_id = p_run_id AND episode_id = p_episode_id AND agent_id = p_agent_id
),

use_recorded AS (
    SELECT (SELECT count(*) FROM recorded) > 0 AND (SELECT end_msg FROM target) IS NOT NULL AS ok
),

from_messages AS (
    SELECT
        r.msg_idx AS ord,
        CASE WHEN r.msg_idx < p.n THEN 'prefix' ELSE 'history' END AS part,
        CASE WHEN r.msg_idx < p.n THEN NULL ELSE s.step_idx END AS from_step,
        r.role, r.content, r.reasoning_content, r.tool_calls, r.tool_call_id, r.name
    FROM recorded AS r
    CROSS JOIN prefix_end AS p
    CROSS JOIN target AS t
    LEFT JOIN spans AS s ON r.msg_idx >= s.lo AND (s.hi IS NULL OR r.msg_idx < s.hi)
    WHERE r.msg_idx < t.end_msg
),

task_prefix AS (  -- fallback prefix: the task as the agent received it
    SELECT
        -1 AS ord, 'prefix' AS part, CAST(NULL AS INTEGER) AS from_step, 'user' AS role,
        CASE
            WHEN p_agent_id = 'main' THEN (SELECT max(instruction) FROM episodes
                                           WHERE run_id = p_run_id AND episode_id = p_episode_id)
            ELSE (SELECT max(a.arguments) FROM agents AS g
                  JOIN actions AS a
                      ON a.run_id = g.run_id AND a.episode_id = g.episode_id AND a.call_id = g.spawned_by_call_id
                  WHERE g.run_id = p_run_id AND g.episode_id = p_episode_id AND g.agent_id = p_agent_id)
        END AS content,
        CAST(NULL AS VARCHAR) AS reasoning_content, CAST(NULL AS VARCHAR) AS tool_calls,
        CAST(NULL AS VARCHAR) AS tool_call_id, CAST(NULL AS VARCHAR) AS name
),

from_ir AS (
    SELECT
        from_step * 1000000 + sub AS ord, 'history' AS part, CAST(from_step AS INTEGER) AS from_step, role, content,
        reasoning_content, tool_calls, tool_call_id, CAST(NULL AS VARCHAR) AS name
    FROM ir_render(p_run_id, p_episode_id, p_agent_id)
    WHERE from_step < p_step_idx
),

chosen AS (
    SELECT * FROM from_messages WHERE (SELECT ok FROM use_recorded)
    UNION ALL
    SELECT * FROM task_prefix WHERE NOT (SELECT ok FROM use_recorded) AND (SELECT n FROM target) > 0
    UNION ALL
    SELECT * FROM from_ir WHERE NOT (SELECT ok FROM use_recorded) AND (SELECT n FROM target) > 0
),

final AS (
    SELECT
        CAST(row_number() OVER (ORDER BY ord) - 1 AS INTEGER) AS position,
        part, from_step, role, content, reasoning_content, tool_calls, tool_call_id, name,
        CAST(ceil((length(coalesce(content, '')) + length(coalesce(tool_calls, ''))
                   + length(coalesce(reasoning_content, ''))) / 4.0) AS BIGINT) + 4 AS est_tokens
    FROM chosen
)

SELECT * FROM final ORDER BY position;

CREATE OR REPLACE MACRO ir_context(p_run_id, p_episode_id, p_agent_id, p_step_idx, k) AS TABLE
WITH full_context AS (
    SELECT * FROM ir_context_messages(p_run_id, p_episode_id, p_agent_id, p_step_idx)
),

final AS (
    SELECT
        CAST(row_number() OVER (ORDER BY position) - 1 AS INTEGER) AS position,
        part, from_step, role, content, reasoning_content, tool_calls, tool_call_id, name, est_tokens
    FROM full_context
    WHERE part = 'prefix' OR k IS NULL OR from_step >= p_step_idx - k
)

SELECT * FROM final ORDER BY position;
