-- ir_context_budget(run_id, episode_id, agent_id, step_idx, max_tokens): the token-budget window of seed 001
-- part 3 §5.2: the global prefix (always kept) plus as many of the most recent whole turns as fit in
-- max_tokens, counting est_tokens (ceil(chars / 4) + 4 per message, see ir_context_messages).
-- grain: one row per message kept, in order. key: position (0-based)
-- A turn is kept whole or not at all; the prefix is kept even when it alone exceeds the budget.
-- DuckDB-specific: table macro.
CREATE OR REPLACE MACRO ir_context_budget(p_run_id, p_episode_id, p_agent_id, p_step_idx, max_tokens) AS TABLE
WITH full_context AS (
    SELECT * FROM ir_context_messages(p_run_id, p_episode_id, p_agent_id, p_step_idx)
),

prefix_tokens AS (
    SELECT coalesce(sum(est_tokens), 0) AS n FROM full_context WHERE part = 'prefix'
),

turn_tokens AS (
    SELECT from_step, sum(est_tokens) AS n
    FROM full_context
    WHERE part = 'history'
    GROUP BY from_step
),

newest_first AS (
    SELECT from_step, sum(n) OVER (ORDER BY from_step DESC ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS cum
    FROM turn_tokens
),

kept AS (
    SELECT from_step FROM newest_first WHERE cum + (SELECT n FROM prefix_tokens) <= max_tokens
),

final AS (
    SELECT
        CAST(row_number() OVER (ORDER BY position) - 1 AS INTEGER) AS position,
        part, from_step, role, content, reasoning_content, tool_calls, tool_call_id, name, est_tokens
    FROM full_context
    WHERE part = 'prefix' OR from_step IN (SELECT from_step FROM kept)
)

SELECT * FROM final ORDER BY position;
