-- export_decisions: every decision (model turn) of every agent in export_scope with its reconstructed context,
-- in one set-based query (seed 001 part 3 §4-§5; the building block of the sft-*, kto, prm and offline-rl kinds).
-- grain: one row per decision (model turn) of any agent, main and sub-agents. key: decision_id
--   = (run_id, episode_id, agent_id, step_idx)
-- Context (`prompt`, JSON[] of OpenAI messages): the agent's global prefix (always kept) + its earlier turns,
-- restricted to the last getvariable('export_window') turns (from_step >= step_idx - K; NULL = all) and then
-- trimmed whole-turn-wise, newest first, to getvariable('export_max_tokens') counting est_tokens (ceil(chars / 4)
-- + 4 per message, the rule of sql/ir/ir_context*.sql; NULL = no budget). Same messages as
-- ir_context / ir_context_budget, without calling them per step.
-- Columns
--   decision_id        md5 of run/episode/agent/step (kinds derive their sample_id from it)
--   prompt             JSON[] context messages; completion JSON[] the one assistant message of the turn with
--                      every tool call (function.arguments an object); observation JSON[] what answered it
--                      (tool / user messages of the turn, empty for the last); tools JSON[] the offered schemas
--   prompt_tokens, completion_tokens, est_tokens (= their sum)
--   action_type, tool_name (first call), n_calls, n_delegations (calls that started a sub-agent),
--   spawned_agent_id (the sub-agent the first call started)
--   is_last_turn       the agent's last turn; protocol_error, policy_failure as in `steps`
--   outcome facts of export_episodes: status, reward, r_success, r_strict, success, import_fidelity,
--   source_format, split, experiment, task_id
-- Privacy: reasoning_content (completion from steps.reasoning, prompt from messages) only with
-- getvariable('export_include_reasoning'); persona per export_messages; nothing derived from the private goal.
-- With getvariable('export_decisions_subset') true, only the decisions of TEMP TABLE export_decisions_wanted,
-- reading only their actions and their agents' messages up to the last wanted turn (preference, a batch of
-- 2,500 synthetic episodes: 2,256 of 35,166 decisions, 9,633 of 70,253 history messages); same rows as without.
-- DuckDB-specific: getvariable, JSON[] lists, window over a range join.
CREATE OR REPLACE VIEW export_decisions AS
WITH decisions AS (  -- every decision, or (export_decisions_subset) only those of export_decisions_wanted
    SELECT *
    FROM (
        SELECT
            s.run_id, s.episode_id, s.agent_id, s.step_idx, s.seq, s.page, s.content, s.reasoning, s.protocol_error,
            s.policy_failure, s.finish_reason, s.model,
            s.step_idx = max(s.step_idx) OVER (PARTITION BY s.run_id, s.episode_id, s.agent_id) AS is_last_turn
        FROM steps AS s
        WHERE s.run_id IN (SELECT run_id FROM export_scope)
    ) AS a
    WHERE NOT coalesce(getvariable('export_decisions_subset'), false)
        OR (a.run_id, a.episode_id, a.agent_id, a.step_idx) IN (
            SELECT (w.run_id, w.episode_id, w.agent_id, w.step_idx) FROM export_decisions_wanted AS w)
),

wanted_turns AS (  -- export_decisions_subset: the turns its decisions read (their agent's, up to the last one's)
    SELECT s.run_id, s.episode_id, s.agent_id, s.step_idx AS from_step
    FROM steps AS s
    JOIN (
        SELECT run_id, episode_id, agent_id, max(step_idx) AS last_step
        FROM export_decisions_wanted
        GROUP BY run_id, episode_id, agent_id
    ) AS w
        ON w.run_id = s.run_id AND w.episode_id = s.episode_id AND w.agent_id = s.agent_id AND s.step_idx <= w.last_step
    WHERE coalesce(getvariable('export_decisions_subset'), false)
),

prefix AS (
    SELECT m.run_id, m.episode_id, m.agent_id, list(m.message ORDER BY m.ord) AS messages, sum(m.est_tokens) AS n
    FROM export_messages AS m
    WHERE m.part = 'prefix' AND (NOT coalesce(getvariable('export_decisions_subset'), false)
        OR (m.run_id, m.episode_id, m.agent_id) IN (
            SELECT (w.run_id, w.episode_id, w.agent_id) FROM export_decisions_wanted AS w))
    GROUP BY m.run_id, m.episode_id, m.agent_id
),

history AS (  -- a decision reads its agent's earlier turns (context) and its own (answers): none past the last
    SELECT m.run_id, m.episode_id, m.agent_id, m.from_step, m.ord, m.role, m.message, m.est_tokens
    FROM export_messages AS m
    WHERE m.part = 'history' AND (NOT coalesce(getvariable('export_decisions_subset'), false)
        OR (m.run_id, m.episode_id, m.agent_id, m.from_step) IN (
            SELECT (w.run_id, w.episode_id, w.agent_id, w.from_step) FROM wanted_turns AS w))
),

turn_tokens AS (
    SELECT run_id, episode_id, agent_id, from_step, sum(est_tokens) AS n
    FROM history
    GROUP BY run_id, episode_id, agent_id, from_step
),

candidate_turns AS (  -- earlier turns inside the window, with tokens summed newest first
    SELECT
        d.run_id, d.episode_id, d.agent_id, d.step_idx, t.from_step,
        sum(t.n) OVER (PARTITION BY d.run_id, d.episode_id, d.agent_id, d.step_idx ORDER BY t.from_step DESC
                       ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS cum
    FROM decisions AS d
    JOIN turn_tokens AS t
        ON t.run_id = d.run_id AND t.episode_id = d.episode_id AND t.agent_id = d.agent_id
        AND t.from_step < d.step_idx
        AND (getvariable('export_window') IS NULL OR t.from_step >= d.step_idx - getvariable('export_window'))
),

kept_turns AS (
    SELECT c.run_id, c.episode_id, c.agent_id, c.step_idx, c.from_step, c.cum
    FROM candidate_turns AS c
    LEFT JOIN prefix AS p ON p.run_id = c.run_id AND p.episode_id = c.episode_id AND p.agent_id = c.agent_id
    WHERE getvariable('export_max_tokens') IS NULL OR c.cum + coalesce(p.n, 0) <= getvariable('export_max_tokens')
),

context AS (
    SELECT k.run_id, k.episode_id, k.agent_id, k.step_idx, list(h.message ORDER BY h.ord) AS messages,
           sum(h.est_tokens) AS n
    FROM kept_turns AS k
    JOIN history AS h
        ON h.run_id = k.run_id AND h.episode_id = k.episode_id AND h.agent_id = k.agent_id AND h.from_step = k.from_step
    GROUP BY k.run_id, k.episode_id, k.agent_id, k.step_idx
),

answers AS (
    SELECT run_id, episode_id, agent_id, from_step AS step_idx, list(message ORDER BY ord) AS messages
    FROM history
    WHERE role <> 'assistant'
    GROUP BY run_id, episode_id, agent_id, from_step
),

calls AS (
    SELECT
        a.run_id, a.episode_id, a.agent_id, a.step_idx,
        count(*) AS n_calls,
        count(*) FILTER (WHERE a.action_type = 'delegate') AS n_delegations,
        arg_min(a.action_type, a.call_idx) AS action_type,
        arg_min(a.tool_name, a.call_idx) AS tool_name,
        arg_min(a.call_id, a.call_idx) AS first_call_id,
        '[' || string_agg(
            CAST(json_object('id', a.call_id, 'type', 'function',
                             'function', json_object('name', a.tool_name, 'arguments', a.arguments)) AS VARCHAR),
            ',' ORDER BY a.call_idx) FILTER (WHERE a.call_id IS NOT NULL AND a.tool_name IS NOT NULL) || ']' AS tool_calls
    FROM actions AS a
    WHERE a.run_id IN (SELECT run_id FROM export_scope) AND (NOT coalesce(getvariable('export_decisions_subset'), false)
        OR (a.run_id, a.episode_id, a.agent_id, a.step_idx) IN (
            SELECT (w.run_id, w.episode_id, w.agent_id, w.step_idx) FROM export_decisions_wanted AS w))
    GROUP BY a.run_id, a.episode_id, a.agent_id, a.step_idx
),

final AS (
    SELECT
        md5(d.run_id || '/' || d.episode_id || '/' || d.agent_id || '/' || CAST(d.step_idx AS VARCHAR)) AS decision_id,
        d.run_id,
        d.episode_id,
        e.task_id,
        d.agent_id,
        coalesce(g.agent_role, CASE WHEN d.agent_id = 'main' THEN 'main' ELSE 'unknown' END) AS agent_role,
        CASE WHEN g.agent_id IS NOT NULL THEN g.parent_agent_id WHEN d.agent_id = 'main' THEN NULL ELSE 'main' END
            AS parent_agent_id,
        coalesce(g.depth, CASE WHEN d.agent_id = 'main' THEN 0 ELSE 1 END) AS depth,
        d.step_idx,
        d.seq,
        d.is_last_turn,
        d.page,
        list_concat(coalesce(p.messages, CAST([] AS JSON[])), coalesce(c.messages, CAST([] AS JSON[]))) AS prompt,
        [export_message(
            'assistant', d.content,
            CASE WHEN coalesce(getvariable('export_include_reasoning'), false) THEN d.reasoning END,
            k.tool_calls, NULL, NULL)] AS completion,
        coalesce(ans.messages, CAST([] AS JSON[])) AS observation,
        coalesce(t.tools, CAST([] AS JSON[])) AS tools,
        CAST(coalesce(p.n, 0) + coalesce(c.n, 0) AS BIGINT) AS prompt_tokens,
        est_tokens_of(d.content, k.tool_calls, d.reasoning) AS completion_tokens,
        CAST(coalesce(p.n, 0) + coalesce(c.n, 0) + est_tokens_of(d.content, k.tool_calls, d.reasoning) AS BIGINT) AS est_tokens,
        k.action_type,
        k.tool_name,
        coalesce(k.n_calls, 0) AS n_calls,
        coalesce(k.n_delegations, 0) AS n_delegations,
        sub.agent_id AS spawned_agent_id,
        d.protocol_error,
        d.policy_failure,
        d.finish_reason,
        d.model,
        e.status,
        e.reward,
        e.r_success,
        e.r_strict,
        e.success,
        e.import_fidelity,
        e.source_format,
        e.split,
        e.experiment
    FROM decisions AS d
    JOIN export_episodes AS e ON e.run_id = d.run_id AND e.episode_id = d.episode_id
    LEFT JOIN agents AS g ON g.run_id = d.run_id AND g.episode_id = d.episode_id AND g.agent_id = d.agent_id
    LEFT JOIN prefix AS p ON p.run_id = d.run_id AND p.episode_id = d.episode_id AND p.agent_id = d.agent_id
    LEFT JOIN context AS c
        ON c.run_id = d.run_id AND c.episode_id = d.episode_id AND c.agent_id = d.agent_id AND c.step_idx = d.step_idx
    LEFT JOIN answers AS ans
        ON ans.run_id = d.run_id AND ans.episode_id = d.episode_id AND ans.agent_id = d.agent_id
        AND ans.step_idx = d.step_idx
    LEFT JOIN calls AS k
        ON k.run_id = d.run_id AND k.episode_id = d.episode_id AND k.agent_id = d.agent_id AND k.step_idx = d.step_idx
    LEFT JOIN export_step_tools AS t
        ON t.run_id = d.run_id AND t.episode_id = d.episode_id AND t.agent_id = d.agent_id AND t.step_idx = d.step_idx
    LEFT JOIN agents AS sub
        ON sub.run_id = d.run_id AND sub.episode_id = d.episode_id AND sub.spawned_by_call_id = k.first_call_id
)

SELECT * FROM final;
