-- error_labels: every deterministic error label of every episode (rules: docs/taxonomy.md, codes: taxonomy;
--               protocol-error and policy-failure codes map to them through protocol_codes).
-- grain: one row per (episode, agent, step, code); episode-scope labels sit on agent 'main' at the step where
--        the episode ended (NULL when it has no step, e.g. a reset failure)
-- key:   (run_id, episode_id, agent_id, step_idx, code)
-- columns: detail = the sub-kind (feedback code, failure stage, tool, repeated action, ...);
--          evidence = a short human-readable reason built from the row's own data.
-- Mostly portable SQL; DuckDB-specific: json_valid / json_extract_string, CTE hints.
CREATE OR REPLACE VIEW error_labels AS
WITH ep AS NOT MATERIALIZED (
    SELECT
        run_id, episode_id, attempt, status, termination_reason, purchase_asin, right_product, reward,
        r_type, r_att, r_option, r_price, error_stage, error_type, error_message
    FROM episodes
),

main_last_step AS NOT MATERIALIZED (
    SELECT run_id, episode_id, max(step_idx) AS step_idx
    FROM steps
    WHERE agent_id = 'main'
    GROUP BY run_id, episode_id
),

infra AS (
    SELECT
        e.run_id, e.episode_id, 'main' AS agent_id, l.step_idx,
        'infra_failure_' || CASE
            WHEN coalesce(e.error_stage, f.stage) IN ('reset', 'model', 'step', 'terminate', 'runtime')
                THEN coalesce(e.error_stage, f.stage)
            ELSE 'other'
        END AS code,
        coalesce(e.error_stage, f.stage) AS detail,
        coalesce(e.error_type, f.exception_type, 'unknown error') || ': ' || coalesce(e.error_message, f.message, '')
            AS evidence
    FROM ep AS e
    LEFT JOIN failures AS f
        ON f.run_id = e.run_id AND f.episode_id = e.episode_id AND f.attempt = e.attempt
    LEFT JOIN main_last_step AS l
        ON l.run_id = e.run_id AND l.episode_id = e.episode_id
    WHERE e.status = 'failed'
),

policy_steps AS (  -- each agent's first policy failure of each kind, labelled through protocol_codes
    SELECT s.run_id, s.episode_id, s.agent_id, min(s.step_idx) AS step_idx, s.policy_failure AS detail,
           coalesce(min(c.label), 'policy_other') AS code
    FROM steps AS s
    LEFT JOIN protocol_codes AS c ON c.code = s.policy_failure AND c.kind = 'policy'
    WHERE s.policy_failure IS NOT NULL
    GROUP BY s.run_id, s.episode_id, s.agent_id, s.policy_failure
),

terminations AS (
    SELECT
        e.run_id, e.episode_id, 'main' AS agent_id, l.step_idx,
        e.termination_reason AS code, e.termination_reason AS detail,
        'termination_reason = ' || e.termination_reason AS evidence
    FROM ep AS e
    LEFT JOIN main_last_step AS l
        ON l.run_id = e.run_id AND l.episode_id = e.episode_id
    WHERE e.status = 'completed' AND e.termination_reason IN ('action_limit', 'generation_length', 'protocol_budget')
    UNION ALL
    SELECT
        g.run_id, g.episode_id, g.agent_id, g.step_idx, g.code, 'policy_failure' AS detail,
        CASE WHEN g.detail = 'generation_length' THEN 'finish_reason = length without a valid tool call'
             ELSE 'policy_failure = ' || g.detail END AS evidence
    FROM policy_steps AS g
    LEFT JOIN ep AS e
        ON e.run_id = g.run_id AND e.episode_id = g.episode_id
    WHERE coalesce(e.termination_reason, '') <> g.code OR g.agent_id <> 'main'
),

outcomes AS (
    SELECT
        e.run_id, e.episode_id, 'main' AS agent_id, l.step_idx, m.code, m.component AS detail,
        m.component || ' = ' || CAST(round(
            CASE m.component
                WHEN 'r_type' THEN e.r_type
                WHEN 'r_att' THEN e.r_att
                WHEN 'r_option' THEN e.r_option
                ELSE e.r_price
            END, 4) AS VARCHAR) || ' (bought ' || e.purchase_asin || ')' AS evidence
    FROM ep AS e
    CROSS JOIN (
        VALUES ('type_miss', 'r_type'), ('attribute_miss', 'r_att'), ('option_miss', 'r_option'), ('over_budget', 'r_price')
    ) AS m (code, component)
    LEFT JOIN main_last_step AS l
        ON l.run_id = e.run_id AND l.episode_id = e.episode_id
    WHERE e.status = 'completed' AND e.purchase_asin IS NOT NULL
      AND CASE m.component
              WHEN 'r_type' THEN e.r_type
              WHEN 'r_att' THEN e.r_att
              WHEN 'r_option' THEN e.r_option
              ELSE e.r_price
          END < 1
    UNION ALL
    SELECT
        e.run_id, e.episode_id, 'main' AS agent_id, l.step_idx, 'wrong_product' AS code, 'right_product' AS detail,
        'bought ' || e.purchase_asin || ', not the goal product' AS evidence
    FROM ep AS e
    LEFT JOIN main_last_step AS l
        ON l.run_id = e.run_id AND l.episode_id = e.episode_id
    WHERE e.status = 'completed' AND e.purchase_asin IS NOT NULL AND e.right_product = false
    UNION ALL
    SELECT
        e.run_id, e.episode_id, 'main' AS agent_id, l.step_idx, 'no_purchase' AS code,
        coalesce(e.termination_reason, 'unknown') AS detail,
        'no purchase; termination_reason = ' || coalesce(e.termination_reason, 'NULL') AS evidence
    FROM ep AS e
    LEFT JOIN main_last_step AS l
        ON l.run_id = e.run_id AND l.episode_id = e.episode_id
    WHERE e.status = 'completed' AND e.r_type IS NOT NULL AND e.purchase_asin IS NULL
    UNION ALL
    SELECT
        e.run_id, e.episode_id, 'main' AS agent_id, l.step_idx, 'task_unsolved' AS code, 'reward' AS detail,
        'reward = ' || CAST(round(e.reward, 4) AS VARCHAR) || ' (a task reward, no reward components)' AS evidence
    FROM ep AS e
    LEFT JOIN main_last_step AS l
        ON l.run_id = e.run_id AND l.episode_id = e.episode_id
    WHERE e.status = 'completed' AND e.reward < 1
      AND e.r_type IS NULL AND e.r_att IS NULL AND e.r_option IS NULL AND e.r_price IS NULL
),

protocol AS (  -- the code's label from protocol_codes; a code it does not list is protocol_other
    SELECT
        s.run_id, s.episode_id, s.agent_id, s.step_idx, coalesce(c.label, 'protocol_other') AS code,
        s.protocol_error AS detail,
        coalesce(s.protocol_feedback, 'protocol error ' || s.protocol_error) AS evidence
    FROM steps AS s
    LEFT JOIN protocol_codes AS c ON c.code = s.protocol_error AND c.kind = 'protocol'
    WHERE s.protocol_error IS NOT NULL
),

invalid AS (
    SELECT
        run_id, episode_id, agent_id, step_idx, 'invalid_action' AS code, min(feedback_code) AS detail,
        min(coalesce(action, tool_name, '?') || ' -> ' || feedback_code || coalesce(': ' || feedback_message, ''))
            AS evidence
    FROM actions
    WHERE action_valid = false AND action_type = 'tool_use' AND feedback_code IS NOT NULL
      AND feedback_code NOT IN (SELECT code FROM protocol_codes WHERE kind = 'protocol')  -- a protocol error's calls
    GROUP BY run_id, episode_id, agent_id, step_idx
),

canonical AS (  -- canonical actions in order; gaps-and-islands finds runs of the same action
    SELECT
        run_id, episode_id, agent_id, step_idx, call_idx, action,
        row_number() OVER (PARTITION BY run_id, episode_id, agent_id ORDER BY step_idx, call_idx)
        - row_number() OVER (PARTITION BY run_id, episode_id, agent_id, action ORDER BY step_idx, call_idx) AS island
    FROM actions
    WHERE action IS NOT NULL AND action_type = 'tool_use'
),

islands AS (
    SELECT
        run_id, episode_id, agent_id, step_idx, action,
        row_number() OVER (PARTITION BY run_id, episode_id, agent_id, action, island ORDER BY step_idx, call_idx) AS pos,
        count(*) OVER (PARTITION BY run_id, episode_id, agent_id, action, island) AS run_length
    FROM canonical
),

loops AS (
    SELECT
        run_id, episode_id, agent_id, step_idx, 'repeated_action_loop' AS code, action AS detail,
        action || ' repeated ' || CAST(run_length AS VARCHAR) || ' times in a row' AS evidence
    FROM islands
    WHERE pos = 3
),

step_search AS (
    SELECT
        run_id, episode_id, agent_id, step_idx,
        max(CASE WHEN action LIKE 'search[%' AND action_valid THEN 1 ELSE 0 END) AS is_search,
        max(CASE WHEN action LIKE 'search[%' THEN action END) AS search_action
    FROM actions
    GROUP BY run_id, episode_id, agent_id, step_idx
),

search_segments AS (  -- a segment = the steps since the agent last stood on an item page
    SELECT
        s.run_id, s.episode_id, s.agent_id, s.step_idx, coalesce(q.is_search, 0) AS is_search, q.search_action,
        sum(CASE WHEN s.page IN ('item', 'description', 'features', 'reviews') THEN 1 ELSE 0 END) OVER (
            PARTITION BY s.run_id, s.episode_id, s.agent_id ORDER BY s.step_idx
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS item_visits
    FROM steps AS s
    LEFT JOIN step_search AS q
        ON q.run_id = s.run_id AND q.episode_id = s.episode_id AND q.agent_id = s.agent_id AND q.step_idx = s.step_idx
),

search_counts AS (
    SELECT
        *,
        sum(is_search) OVER (
            PARTITION BY run_id, episode_id, agent_id, item_visits ORDER BY step_idx
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS searches
    FROM search_segments
),

churn AS (
    SELECT
        run_id, episode_id, agent_id, step_idx, 'search_churn' AS code, search_action AS detail,
        'third search without opening an item: ' || search_action AS evidence
    FROM search_counts
    WHERE is_search = 1 AND searches = 3
),

tool_errors AS (
    SELECT
        o.run_id, o.episode_id, o.agent_id, o.step_idx, 'tool_error' AS code, min(a.tool_name) AS detail,
        min(coalesce(a.tool_name, '?') || ': ' || left(coalesce(o.content, ''), 200)) AS evidence
    FROM observations AS o
    LEFT JOIN actions AS a
        ON a.run_id = o.run_id AND a.episode_id = o.episode_id AND a.agent_id = o.agent_id
        AND a.step_idx = o.step_idx AND a.call_id = o.call_id
    WHERE o.observation_type = 'tool_result' AND o.is_error
    GROUP BY o.run_id, o.episode_id, o.agent_id, o.step_idx
),

file_calls AS NOT MATERIALIZED (
    SELECT
        run_id, episode_id, agent_id, step_idx, call_idx, tool_name,
        CASE WHEN tool_name IN ('Edit', 'MultiEdit', 'NotebookEdit', 'edit_file', 'str_replace', 'str_replace_editor',
                                'replace_in_file', 'apply_patch') THEN 'edit' ELSE 'read' END AS kind,
        CASE WHEN json_valid(arguments) THEN coalesce(
            json_extract_string(arguments, '$.file_path'), json_extract_string(arguments, '$.path'),
            json_extract_string(arguments, '$.notebook_path'), json_extract_string(arguments, '$.filename'))
        END AS path
    FROM actions
    WHERE tool_name IN ('Read', 'read_file', 'view_file', 'open_file', 'NotebookRead', 'Edit', 'MultiEdit',
                        'NotebookEdit', 'edit_file', 'str_replace', 'str_replace_editor', 'replace_in_file',
                        'apply_patch')
),

blind_edits AS (
    SELECT
        e.run_id, e.episode_id, e.agent_id, e.step_idx, 'edit_without_read' AS code, min(e.path) AS detail,
        min(e.tool_name || ' of ' || e.path || ' without an earlier Read of it by this agent') AS evidence
    FROM file_calls AS e
    LEFT JOIN file_calls AS r
        ON r.run_id = e.run_id AND r.episode_id = e.episode_id AND r.agent_id = e.agent_id
        AND r.kind = 'read' AND r.path = e.path AND r.step_idx < e.step_idx
    WHERE e.kind = 'edit' AND e.path IS NOT NULL AND r.path IS NULL
    GROUP BY e.run_id, e.episode_id, e.agent_id, e.step_idx
),

tool_calls AS (  -- calls answered by a tool (not by the environment)
    SELECT
        a.run_id, a.episode_id, a.agent_id, a.step_idx, a.call_idx, a.tool_name, a.arguments,
        row_number() OVER (
            PARTITION BY a.run_id, a.episode_id, a.agent_id, a.tool_name, a.arguments
            ORDER BY a.step_idx, a.call_idx) AS occurrence
    FROM actions AS a
    JOIN observations AS o
        ON o.run_id = a.run_id AND o.episode_id = a.episode_id AND o.agent_id = a.agent_id
        AND o.step_idx = a.step_idx AND o.call_id = a.call_id
    WHERE o.observation_type IN ('tool_result', 'subagent_summary') AND a.tool_name IS NOT NULL
),

repeats AS (
    SELECT
        run_id, episode_id, agent_id, step_idx, 'repeated_identical_call' AS code, min(tool_name) AS detail,
        min(tool_name || '(' || left(coalesce(arguments, ''), 160) || ') call #' || CAST(occurrence AS VARCHAR))
            AS evidence
    FROM tool_calls
    WHERE occurrence >= 2
    GROUP BY run_id, episode_id, agent_id, step_idx
),

subagents AS (
    SELECT
        a.run_id, a.episode_id, a.agent_id, a.step_idx, 'subagent_failure' AS code,
        min(CASE WHEN json_valid(a.arguments) THEN coalesce(json_extract_string(a.arguments, '$.subagent_type'),
                                                             json_extract_string(a.arguments, '$.agent_type')) END)
            AS detail,
        min(a.tool_name || ': ' || coalesce(left(o.content, 200), 'no sub-agent result')) AS evidence
    FROM actions AS a
    LEFT JOIN observations AS o
        ON o.run_id = a.run_id AND o.episode_id = a.episode_id AND o.agent_id = a.agent_id
        AND o.step_idx = a.step_idx AND o.call_id = a.call_id
    WHERE a.action_type = 'delegate' AND (o.call_id IS NULL OR o.is_error OR o.observation_type = 'error')
    GROUP BY a.run_id, a.episode_id, a.agent_id, a.step_idx
),

all_labels AS (
    SELECT * FROM infra
    UNION ALL SELECT * FROM terminations
    UNION ALL SELECT * FROM outcomes
    UNION ALL SELECT * FROM protocol
    UNION ALL SELECT * FROM invalid
    UNION ALL SELECT * FROM loops
    UNION ALL SELECT * FROM churn
    UNION ALL SELECT * FROM tool_errors
    UNION ALL SELECT * FROM blind_edits
    UNION ALL SELECT * FROM repeats
    UNION ALL SELECT * FROM subagents
),

final AS (
    SELECT
        l.run_id, l.episode_id, l.agent_id, CAST(l.step_idx AS INTEGER) AS step_idx, l.code, t.scope, t.category,
        t.precedence, min(l.detail) AS detail, min(l.evidence) AS evidence
    FROM all_labels AS l
    JOIN taxonomy AS t ON t.code = l.code
    GROUP BY l.run_id, l.episode_id, l.agent_id, l.step_idx, l.code, t.scope, t.category, t.precedence
)

SELECT * FROM final;
