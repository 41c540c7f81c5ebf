-- export: atif
-- grain: one row per episode (its last attempt): its ATIF trajectory (Harbor's Agent Trajectory Interchange Format)
-- trl: -
-- sample: run_id, episode_id
-- filters: status, reward, r_success, success, import_fidelity, source_format, split, experiment, task_id
-- record: atif
-- batch-episodes: 2000
-- description: the episode as an ATIF trajectory (sub-agents as nested trajectories), one per line, as `shopsim-wh dump --format atif` writes it
-- Column `record`: the trajectory as JSON text, assembled set-based here with the key order and values of the dump
-- writer (to_atif in shopsim_wh/ingest/dump.py): per agent, its system / user messages and its steps interleaved
-- in message order (step k at the k-th assistant message, steps past the last one appended), each step with its
-- tool calls, observation results (a sub-agent summary refers to the sub-agent's embedded trajectory) and token
-- metrics; the main trajectory adds final_metrics and extra (the episode's facts and the sub-agents' trajectories
-- in the order the main agent refers to them). shopsim_wh/export/records.py streams it as for shopsimrl-v4
-- (re-spelling, privacy). `record` is NULL, with `record_fallback` saying why, where the dump writer builds it:
--   nested     a referred sub-agent refers to sub-agents itself (the writer recurses);
--   lenient    tool arguments that may be lenient JSON (NaN, Infinity, trailing commas, comments).
-- No private goal is stored, so none is written.
-- Portable SQL except CREATE OR REPLACE, getvariable, AS MATERIALIZED, json(), json_valid / json_type, to_json,
-- string_agg with ORDER BY, IGNORE NULLS-free windows only.
CREATE OR REPLACE VIEW export_atif AS
WITH ep AS MATERIALIZED (
    SELECT
        x.run_id, x.episode_id, x.task_id, x.status, x.reward, x.r_success, x.success, x.import_fidelity,
        x.source_format, x.split, x.experiment,
        e.attempt, e.done, e.reward AS episode_reward, e.termination_reason, e.source_format AS episode_format,
        e.sample_id, e.tokens_in, e.tokens_out
    FROM export_episodes AS x
    JOIN episodes AS e ON e.run_id = x.run_id AND e.episode_id = x.episode_id
),

-- the sub-agent a call id spawned (the writer's dict by spawned_by_call_id: the last in (depth, agent_id) order)
children AS (
    SELECT run_id, episode_id, call_id, agent_id, agent_role
    FROM (
        SELECT
            run_id, episode_id, spawned_by_call_id AS call_id, agent_id, agent_role,
            row_number() OVER (PARTITION BY run_id, episode_id, spawned_by_call_id ORDER BY depth DESC, agent_id DESC) AS rn
        FROM agents
        WHERE coalesce(spawned_by_call_id, '') <> ''
    ) AS a
    WHERE rn = 1
),

obs AS MATERIALIZED (
    SELECT
        o.run_id, o.episode_id, o.agent_id, o.step_idx, o.call_id, c.agent_id AS child,
        concat('{"source_call_id":', coalesce(CAST(to_json(o.call_id) AS VARCHAR), 'null'),
               ',"content":', coalesce(CAST(to_json(o.content) AS VARCHAR), 'null'),
               CASE WHEN c.agent_id IS NOT NULL THEN concat(
                   ',"subagent_trajectory_ref":[{"session_id":', CAST(to_json(o.episode_id || '::' || c.agent_id) AS VARCHAR),
                   ',"trajectory_path":null,"extra":{"agent_id":', CAST(to_json(c.agent_id) AS VARCHAR),
                   ',"agent_role":', coalesce(CAST(to_json(c.agent_role) AS VARCHAR), 'null'), ',"embedded":true}}]') END,
               '}') AS j
    FROM observations AS o
    LEFT JOIN children AS c
        ON o.observation_type = 'subagent_summary'
        AND c.run_id = o.run_id AND c.episode_id = o.episode_id AND c.call_id = o.call_id
),

results AS (
    SELECT run_id, episode_id, agent_id, step_idx, '[' || string_agg(j, ',' ORDER BY call_id NULLS FIRST) || ']' AS results
    FROM obs
    GROUP BY run_id, episode_id, agent_id, step_idx
),

calls AS (
    SELECT
        run_id, episode_id, agent_id, step_idx,
        '[' || string_agg(concat(
            '{"tool_call_id":', coalesce(CAST(to_json(call_id) AS VARCHAR), 'null'),
            ',"function_name":', coalesce(CAST(to_json(tool_name) AS VARCHAR), 'null'),
            ',"arguments":', CASE
                WHEN arguments IS NULL THEN '{}'
                WHEN NOT json_valid(arguments) THEN concat('{"_raw":', CAST(to_json(arguments) AS VARCHAR), '}')
                WHEN json_type(arguments) = 'OBJECT' THEN CAST(json(arguments) AS VARCHAR)
                ELSE concat('{"_value":', CAST(json(arguments) AS VARCHAR), '}') END,
            '}'), ',' ORDER BY call_idx) || ']' AS calls,
        bool_or(coalesce(regexp_matches(arguments, 'NaN|Infinity|,\s*[\]}]|/[*/]'), false)) AS lenient
    FROM actions
    WHERE coalesce(call_id, '') <> '' OR coalesce(tool_name, '') <> ''
    GROUP BY run_id, episode_id, agent_id, step_idx
),

-- a step's ATIF object without its step_id (given by its place among the agent's items)
step_body AS (
    SELECT
        s.run_id, s.episode_id, s.agent_id, s.step_idx, coalesce(c.lenient, false) AS lenient,
        concat(
            '"source":"agent","message":', CAST(to_json(coalesce(s.content, '')) AS VARCHAR),
            CASE WHEN s.started_at IS NOT NULL THEN concat(',"timestamp":"', strftime(s.started_at, '%Y-%m-%dT%H:%M:%S'),
                CASE WHEN strftime(s.started_at, '%f') = '000000' THEN '' ELSE '.' || strftime(s.started_at, '%f') END,
                CASE WHEN timezone(s.started_at) >= 0 THEN '+' ELSE '-' END,
                printf('%02d:%02d', abs(timezone(s.started_at)) // 3600, abs(timezone(s.started_at)) % 3600 // 60), '"') END,
            CASE WHEN coalesce(s.model, '') <> '' THEN ',"model_name":' || CAST(to_json(s.model) AS VARCHAR) END,
            CASE WHEN s.reasoning IS NOT NULL THEN ',"reasoning_content":' || CAST(to_json(s.reasoning) AS VARCHAR) END,
            CASE WHEN c.calls IS NOT NULL THEN ',"tool_calls":' || c.calls END,
            CASE WHEN r.results IS NOT NULL THEN ',"observation":{"results":' || r.results || '}' END,
            CASE WHEN s.tokens_in IS NOT NULL OR s.tokens_out IS NOT NULL THEN concat(',"metrics":{',
                concat_ws(',', '"prompt_tokens":' || CAST(s.tokens_in AS VARCHAR),
                          '"completion_tokens":' || CAST(s.tokens_out AS VARCHAR)), '}') END,
            '}') AS body
    FROM steps AS s
    LEFT JOIN calls AS c
        ON c.run_id = s.run_id AND c.episode_id = s.episode_id AND c.agent_id = s.agent_id AND c.step_idx = s.step_idx
    LEFT JOIN results AS r
        ON r.run_id = s.run_id AND r.episode_id = s.episode_id AND r.agent_id = s.agent_id AND r.step_idx = s.step_idx
),

-- each message with k = the assistant messages before it (step k sits at the k-th assistant message)
msg AS (
    SELECT
        run_id, episode_id, agent_id, msg_idx, role, content,
        coalesce(sum(CASE WHEN role = 'assistant' THEN 1 ELSE 0 END) OVER (
            PARTITION BY run_id, episode_id, agent_id ORDER BY msg_idx
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS k
    FROM messages
),

assistant_count AS (
    SELECT run_id, episode_id, agent_id, count(*) FILTER (WHERE role = 'assistant') AS n
    FROM messages
    GROUP BY run_id, episode_id, agent_id
),

items AS (
    SELECT
        m.run_id, m.episode_id, m.agent_id, 0 AS grp, m.msg_idx AS ord, b.step_idx,
        coalesce(b.body, concat('"source":', CAST(to_json(m.role) AS VARCHAR), ',"message":',
                                CAST(to_json(coalesce(m.content, '')) AS VARCHAR), '}')) AS body,
        coalesce(b.lenient, false) AS lenient
    FROM msg AS m
    LEFT JOIN step_body AS b
        ON m.role = 'assistant' AND b.run_id = m.run_id AND b.episode_id = m.episode_id AND b.agent_id = m.agent_id
        AND b.step_idx = m.k
    WHERE m.role IN ('system', 'user') OR b.step_idx IS NOT NULL
    UNION ALL
    SELECT b.run_id, b.episode_id, b.agent_id, 1 AS grp, b.step_idx AS ord, b.step_idx, b.body, b.lenient
    FROM step_body AS b
    LEFT JOIN assistant_count AS n ON n.run_id = b.run_id AND n.episode_id = b.episode_id AND n.agent_id = b.agent_id
    WHERE b.step_idx >= coalesce(n.n, 0)
),

numbered AS MATERIALIZED (
    SELECT *, row_number() OVER (PARTITION BY run_id, episode_id, agent_id ORDER BY grp, ord) AS step_id
    FROM items
),

-- every agent's trajectory object, main and sub-agents alike (session ids: the episode's, episode::agent)
traj AS MATERIALIZED (
    SELECT
        g.run_id, g.episode_id, g.agent_id,
        concat('{"schema_version":"ATIF-v1.7","session_id":',
               CAST(to_json(CASE WHEN g.agent_id = 'main' THEN g.episode_id ELSE g.episode_id || '::' || g.agent_id END) AS VARCHAR),
               ',"agent":{"name":"shopsim-wh","version":',
               coalesce(CAST(to_json(getvariable('export_tool_version')) AS VARCHAR), 'null'),
               ',"model_name":', coalesce(CAST(to_json(a.model) AS VARCHAR), 'null'),
               '},"steps":', coalesce(n.steps, '[]'), '}') AS j,
        coalesce(n.n_steps, 0) AS n_steps,
        coalesce(n.lenient, false) AS lenient
    FROM (SELECT run_id, episode_id, 'main' AS agent_id FROM ep
          UNION
          SELECT run_id, episode_id, child FROM obs WHERE child IS NOT NULL) AS g
    LEFT JOIN (SELECT run_id, episode_id, agent_id, any_value(model) AS model FROM agents
               GROUP BY run_id, episode_id, agent_id) AS a
        ON a.run_id = g.run_id AND a.episode_id = g.episode_id AND a.agent_id = g.agent_id
    LEFT JOIN (SELECT run_id, episode_id, agent_id, count(*) AS n_steps, bool_or(lenient) AS lenient,
                      '[' || string_agg(concat('{"step_id":', CAST(step_id AS VARCHAR), ',', body), ',' ORDER BY step_id) || ']' AS steps
               FROM numbered GROUP BY run_id, episode_id, agent_id) AS n
        ON n.run_id = g.run_id AND n.episode_id = g.episode_id AND n.agent_id = g.agent_id
),

-- the main agent's references to sub-agents, in its item order then call order
refs AS (
    SELECT o.run_id, o.episode_id, o.child, i.step_id, o.call_id
    FROM obs AS o
    JOIN numbered AS i
        ON i.run_id = o.run_id AND i.episode_id = o.episode_id AND i.agent_id = o.agent_id AND i.step_idx = o.step_idx
    WHERE o.agent_id = 'main' AND o.child IS NOT NULL
),

subs AS (
    SELECT
        r.run_id, r.episode_id,
        string_agg(t.j, ',' ORDER BY r.step_id, r.call_id NULLS FIRST) AS subs,
        bool_or(t.lenient) AS lenient,
        -- a referred sub-agent that refers to sub-agents itself: the writer recurses (Python builds it)
        bool_or(EXISTS (SELECT 1 FROM obs AS o2 WHERE o2.run_id = r.run_id AND o2.episode_id = r.episode_id
                        AND o2.agent_id = r.child AND o2.child IS NOT NULL)) AS nested
    FROM refs AS r
    JOIN traj AS t ON t.run_id = r.run_id AND t.episode_id = r.episode_id AND t.agent_id = r.child
    GROUP BY r.run_id, r.episode_id
),

assembled AS (
    SELECT
        ep.*,
        CASE
            WHEN coalesce(s.nested, false) THEN 'nested'
            WHEN coalesce(t.lenient, false) OR coalesce(s.lenient, false) THEN 'lenient'
        END AS record_fallback,
        concat(
            substr(t.j, 1, length(t.j) - 1),
            ',"final_metrics":{"total_prompt_tokens":', coalesce(CAST(ep.tokens_in AS VARCHAR), 'null'),
            ',"total_completion_tokens":', coalesce(CAST(ep.tokens_out AS VARCHAR), 'null'),
            ',"total_steps":', CAST(t.n_steps AS VARCHAR),
            ',"extra":{"reward":', coalesce(CAST(to_json(ep.episode_reward) AS VARCHAR), 'null'), '}}',
            ',"extra":{"episode":{"run_id":', CAST(to_json(ep.run_id) AS VARCHAR),
            ',"attempt":', coalesce(CAST(ep.attempt AS VARCHAR), 'null'),
            ',"status":', coalesce(CAST(to_json(ep.status) AS VARCHAR), 'null'),
            ',"done":', coalesce(CAST(to_json(ep.done) AS VARCHAR), 'null'),
            ',"reward":', coalesce(CAST(to_json(ep.episode_reward) AS VARCHAR), 'null'),
            ',"termination_reason":', coalesce(CAST(to_json(ep.termination_reason) AS VARCHAR), 'null'),
            ',"source_format":', coalesce(CAST(to_json(ep.episode_format) AS VARCHAR), 'null'),
            ',"task_id":', coalesce(CAST(ep.task_id AS VARCHAR), 'null'),
            ',"sample_id":', coalesce(CAST(ep.sample_id AS VARCHAR), 'null'),
            '},"subagent_trajectories":[', coalesce(s.subs, ''), ']}}') AS text
    FROM ep
    JOIN traj AS t ON t.run_id = ep.run_id AND t.episode_id = ep.episode_id AND t.agent_id = 'main'
    LEFT JOIN subs AS s ON s.run_id = ep.run_id AND s.episode_id = ep.episode_id
)

SELECT
    md5(run_id || '/' || episode_id || ':atif') AS sample_id,
    run_id, episode_id, task_id, status, reward, r_success, success, import_fidelity, source_format, split, experiment,
    record_fallback,
    CASE WHEN record_fallback IS NULL THEN text END AS record
FROM assembled;
