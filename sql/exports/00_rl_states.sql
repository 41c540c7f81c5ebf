-- export_rl_states: state and action identity of every decision, with Monte-Carlo values, for the preference,
-- prm, kto and offline-rl kinds (docs/export_rl.md).
-- grain: one row per decision (model turn) of any agent in export_scope. key: (run_id, episode_id, agent_id, step_idx)
-- Columns
--   t, n_turns     0-based position of the decision among the agent's turns, and their number
--   prefix_key     md5 over the agent's global prefix (export_messages part 'prefix')
--   state_key      md5 over (agent_role, prefix, every earlier turn of the agent, the offered tool set): two
--                  decisions are in the same state iff the model was shown the same conversation with the same
--                  tools. A message counts by role, content and its tool calls' (name, arguments), hashed as
--                  text both engines spell alike (name, chr(31), arguments text; calls joined by chr(30)); call
--                  ids (random per rollout) and reasoning are left out. The whole history counts, not the
--                  --window/--max-tokens trimmed prompt.
--   action_key     md5 over the turn's own response: its calls' (name, arguments) in call order and its text
--   mc_n, mc_value rollouts (completed episodes with a reward, in scope) that passed through this state AND took
--                  this action, and the mean of their final reward (episodes.reward): Q(s, a) by Monte Carlo
--   state_n, state_value, state_actions   the same over every action taken from the state: V(s), and how
--                  many distinct actions were taken there
-- DuckDB-specific: md5, string_agg ... ORDER BY, window frames over strings, lambdas.
CREATE OR REPLACE VIEW export_rl_states AS
WITH msg AS (
    SELECT
        run_id, episode_id, agent_id, part, from_step, ord,
        md5(coalesce(message ->> 'role', '') || chr(31) || coalesce(message ->> 'content', '') || chr(31)
            || coalesce(array_to_string(list_transform(CAST(message -> 'tool_calls' AS JSON[]), lambda c:
                   coalesce(json_extract_string(c, '$.function.name'), '') || chr(31)
                   || coalesce(json_extract_string(c, '$.function.arguments'), '')),
               chr(30)), '')) AS h
    FROM export_messages
),

prefixes AS (
    SELECT run_id, episode_id, agent_id, md5(string_agg(h, '' ORDER BY ord)) AS prefix_key
    FROM msg
    WHERE part = 'prefix'
    GROUP BY run_id, episode_id, agent_id
),

turns AS (
    SELECT run_id, episode_id, agent_id, from_step, md5(string_agg(h, '' ORDER BY ord)) AS turn_key
    FROM msg
    WHERE part = 'history'
    GROUP BY run_id, episode_id, agent_id, from_step
),

responses AS (
    SELECT
        run_id, episode_id, agent_id, step_idx,
        string_agg(coalesce(tool_name, '') || chr(31) || coalesce(arguments, ''), chr(30) ORDER BY call_idx) AS calls
    FROM actions
    WHERE run_id IN (SELECT run_id FROM export_scope)
    GROUP BY run_id, episode_id, agent_id, step_idx
),

decisions AS (
    SELECT
        s.run_id, s.episode_id, s.agent_id, s.step_idx, s.tools_hash,
        coalesce(g.agent_role, CASE WHEN s.agent_id = 'main' THEN 'main' ELSE 'unknown' END) AS agent_role,
        CAST(row_number() OVER w - 1 AS INTEGER) AS t,
        CAST(count(*) OVER (PARTITION BY s.run_id, s.episode_id, s.agent_id) AS INTEGER) AS n_turns,
        coalesce(string_agg(tr.turn_key, '') OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), '') AS history,
        md5(coalesce(r.calls, '') || chr(29) || coalesce(s.content, '')) AS action_key
    FROM steps AS s
    LEFT JOIN agents AS g ON g.run_id = s.run_id AND g.episode_id = s.episode_id AND g.agent_id = s.agent_id
    LEFT JOIN turns AS tr
        ON tr.run_id = s.run_id AND tr.episode_id = s.episode_id AND tr.agent_id = s.agent_id AND tr.from_step = s.step_idx
    LEFT JOIN responses AS r
        ON r.run_id = s.run_id AND r.episode_id = s.episode_id AND r.agent_id = s.agent_id AND r.step_idx = s.step_idx
    WHERE s.run_id IN (SELECT run_id FROM export_scope)
    WINDOW w AS (PARTITION BY s.run_id, s.episode_id, s.agent_id ORDER BY s.step_idx)
),

keyed AS (
    SELECT
        d.run_id, d.episode_id, e.task_id, d.agent_id, d.agent_role, d.step_idx, d.t, d.n_turns, p.prefix_key,
        md5(d.agent_role || chr(31) || coalesce(p.prefix_key, '') || chr(31) || d.history || chr(31)
            || coalesce(d.tools_hash, '')) AS state_key,
        d.action_key,
        e.status,
        e.reward,
        e.status = 'completed' AND e.reward IS NOT NULL AS rated
    FROM decisions AS d
    JOIN export_episodes AS e ON e.run_id = d.run_id AND e.episode_id = d.episode_id
    LEFT JOIN prefixes AS p ON p.run_id = d.run_id AND p.episode_id = d.episode_id AND p.agent_id = d.agent_id
),

q AS (
    -- exact sums (DECIMAL): a float sum's value depends on the order the threads add rows in, and the shards
    -- must be byte-identical from run to run
    SELECT task_id, state_key, action_key, count(*) AS n, sum(CAST(reward AS DECIMAL(38, 24))) AS total,
           CAST(sum(CAST(reward AS DECIMAL(38, 24))) AS DOUBLE) / count(*) AS value
    FROM keyed
    WHERE rated
    GROUP BY task_id, state_key, action_key
),

v AS (
    SELECT task_id, state_key, sum(n) AS n, CAST(sum(total) AS DOUBLE) / sum(n) AS value, count(*) AS n_actions
    FROM q
    GROUP BY task_id, state_key
),

final AS (
    SELECT
        k.run_id, k.episode_id, k.task_id, k.agent_id, k.agent_role, k.step_idx, k.t, k.n_turns, k.prefix_key,
        k.state_key, k.action_key, k.status, k.reward, k.rated,
        CAST(coalesce(q.n, 0) AS INTEGER) AS mc_n,
        q.value AS mc_value,
        CAST(coalesce(v.n, 0) AS INTEGER) AS state_n,
        v.value AS state_value,
        CAST(coalesce(v.n_actions, 0) AS INTEGER) AS state_actions
    FROM keyed AS k
    LEFT JOIN q ON q.task_id IS NOT DISTINCT FROM k.task_id AND q.state_key = k.state_key AND q.action_key = k.action_key
    LEFT JOIN v ON v.task_id IS NOT DISTINCT FROM k.task_id AND v.state_key = k.state_key
)

SELECT * FROM final;

-- export_step_rules: the decisions the error taxonomy put a step-scope label on (kto and prm label them false).
-- grain: one row per labelled decision in export_scope. key: (run_id, episode_id, agent_id, step_idx)
--   rule  the lowest-precedence step-scope code of the decision (protocol_*, invalid_action,
--         repeated_action_loop, search_churn, repeated_identical_call, tool_error, edit_without_read,
--         subagent_failure); n_rules how many step-scope codes it has
-- DuckDB-specific: arg_min.
CREATE OR REPLACE VIEW export_step_rules AS
SELECT run_id, episode_id, agent_id, step_idx, arg_min(code, precedence) AS rule, count(*) AS n_rules
FROM error_labels
WHERE scope = 'step' AND run_id IN (SELECT run_id FROM export_scope)
GROUP BY run_id, episode_id, agent_id, step_idx;
