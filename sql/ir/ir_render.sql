-- ir_render(run_id, episode_id, agent_id): an agent's turns rendered back into OpenAI chat messages from the
-- Trajectory IR alone (steps + actions + observations), without the `messages` table.
-- grain: one row per rendered message of the agent's turns (the global prefix is not included)
-- key:   (from_step, sub)   -- sub orders the messages of one turn: 0 the assistant message, 1+call_idx its
--                              tool results, 50000 feedback to a response without a call, 100000 hook context
-- Rendering rules (docs/conventions.md, in reverse):
--   * assistant: content = steps.content, tool_calls = JSON list [{"id", "type": "function", "function":
--     {"name", "arguments"}}] of the turn's calls with a call id; reasoning_content stays NULL: earlier turns'
--     reasoning is not sent back to the model by the runner (ir_steps.reasoning keeps it). No assistant message
--     for a turn with neither a call nor visible text, nor for a policy failure (generation_length): the
--     runtime (ShopSimRL's protocol) appends nothing for those;
--   * one `tool` message per answered call, in call order (content = observation text or protocol feedback);
--   * an observation answering no call (feedback to a response without a tool call) = a `user` message;
--   * hook_context observations = `user` messages after the tool results;
--   * the observation of a `terminate` action is not shown to the model (the episode is over).
-- ir_context uses this for agents whose messages were not recorded; tests check it reproduces `messages`.
-- DuckDB-specific: table macro, json_object, string_agg(... ORDER BY ...).
CREATE OR REPLACE MACRO ir_render(p_run_id, p_episode_id, p_agent_id) AS TABLE
WITH turns AS (
    SELECT step_idx, content, policy_failure
    FROM steps
    WHERE run_id = p_run_id AND episode_id = p_episode_id AND agent_id = p_agent_id
),

calls AS (
    SELECT step_idx, call_idx, call_id, tool_name, arguments, action_type
    FROM actions
    WHERE run_id = p_run_id AND episode_id = p_episode_id AND agent_id = p_agent_id
),

tool_calls AS (
    SELECT
        step_idx,
        '[' || string_agg(
            CAST(json_object(
                'id', call_id, 'type', 'function',
                'function', json_object('name', tool_name, 'arguments', arguments)) AS VARCHAR),
            ',' ORDER BY call_idx) || ']' AS tool_calls
    FROM calls
    WHERE call_id IS NOT NULL AND tool_name IS NOT NULL
    GROUP BY step_idx
),

obs AS (
    SELECT o.step_idx, o.call_id, o.observation_type, o.content, c.call_idx, c.action_type
    FROM observations AS o
    LEFT JOIN calls AS c
        ON c.step_idx = o.step_idx AND c.call_id IS NOT DISTINCT FROM o.call_id
        AND coalesce(o.observation_type, '') <> 'hook_context'
    WHERE o.run_id = p_run_id AND o.episode_id = p_episode_id AND o.agent_id = p_agent_id
),

assistant AS (
    SELECT
        t.step_idx AS from_step, 0 AS sub, 'assistant' AS role, t.content, CAST(NULL AS VARCHAR) AS reasoning_content,
        tc.tool_calls, CAST(NULL AS VARCHAR) AS tool_call_id
    FROM turns AS t
    LEFT JOIN tool_calls AS tc ON tc.step_idx = t.step_idx
    WHERE t.policy_failure IS NULL AND (tc.tool_calls IS NOT NULL OR trim(coalesce(t.content, '')) <> '')
),

answers AS (
    SELECT
        step_idx AS from_step,
        CASE
            WHEN observation_type = 'hook_context' THEN 100000
            WHEN call_idx IS NULL THEN 50000
            ELSE 1 + call_idx
        END AS sub,
        CASE WHEN call_idx IS NOT NULL AND call_id IS NOT NULL THEN 'tool' ELSE 'user' END AS role,
        content,
        CAST(NULL AS VARCHAR) AS reasoning_content,
        CAST(NULL AS VARCHAR) AS tool_calls,
        CASE WHEN call_idx IS NOT NULL THEN call_id END AS tool_call_id
    FROM obs
    WHERE coalesce(action_type, '') <> 'terminate'
),

final AS (
    SELECT * FROM assistant
    UNION ALL
    SELECT * FROM answers
)

SELECT * FROM final;
