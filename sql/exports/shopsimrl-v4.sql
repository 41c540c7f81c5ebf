-- export: shopsimrl-v4
-- grain: one row per episode (its last attempt): the ShopSimRL `shopsimrl-episode-v4` record
-- trl: -
-- sample: run_id, episode_id
-- filters: status, reward, r_success, success, import_fidelity, source_format, split, experiment, task_id
-- record: shopsimrl-v4
-- batch-episodes: 2000
-- description: the episode re-emitted in ShopSimRL's runtime record format (what `shopsim-wh dump` writes), one per line; ingest reads it back
-- Column `record`: the whole record as JSON text, assembled set-based here (every episode of a batch at once) with
-- the key order and values of the dump writer (shopsim_wh/ingest/dump_v4.py, whose docstring says which column
-- feeds which field). shopsim_wh/export/records.py streams it, re-spells the few numbers and escapes DuckDB writes
-- differently from orjson, and applies the privacy policy. `record` is NULL for the rare episodes this query does
-- not spell; column `record_fallback` says why, and records.py builds those with the dump writer:
--   residual   episodes.source_extra holds what no column holds (ingested records with quirks: verbatim parts,
--              key orders, absent keys), restored key by key in Python;
--   step       a main-agent step the writer would build differently: its environment answer's payload holds
--              `observation` / `observation_state` values other than the columns' (replaced in place), its
--              metadata carries `model_extra` (keys merged into `model` in place), or its tool arguments /
--              protocol feedback may be lenient JSON (NaN, Infinity, trailing commas, comments) that DuckDB's
--              reader accepts and the writer's strict parser does not;
--   payload    the same payload conflict in the episode's terminal answer.
-- Key order follows dump_v4.py: top level, job, provenance (built from `runs` unless the ingested record's own),
-- step (step_index, observation, tools, model, [protocol_error, protocol_feedback], [policy_failure], action,
-- environment), model, message (role, content, then reasoning_content / tool_call_id / name / tool_calls when set).
-- No private goal is stored, so none is written.
-- Portable SQL except CREATE OR REPLACE, getvariable, AS MATERIALIZED, json(), json_exists / json_extract /
-- json_type, to_json, string_agg and first with ORDER BY, unnest / generate_subscripts, IGNORE NULLS (sqlglot maps
-- most of them). JSON objects whose keys depend on the row are concatenated text, not json_object.
CREATE OR REPLACE VIEW export_shopsimrl_v4 AS
WITH ep AS MATERIALIZED (
    SELECT
        x.run_id, x.episode_id, x.task_id, x.status, x.reward, x.r_success, x.success, x.import_fidelity,
        x.source_format, x.split, x.experiment,
        e.attempt, e.sample_id, e.seed, e.split AS episode_split, e.done, e.reward AS episode_reward,
        e.reward_detail, e.purchase_asin, e.termination_reason, e.persona, e.prompt_hash, e.skill_ids,
        e.started_at, e.finished_at, e.duration_s, e.reset_payload, e.source_extra
    FROM export_episodes AS x
    JOIN episodes AS e ON e.run_id = x.run_id AND e.episode_id = x.episode_id
),

-- each message of the main agent as JSON text (a NULL value spelt null)
msg AS (
    SELECT
        run_id, episode_id, msg_idx, role, content,
        row_number() OVER (PARTITION BY run_id, episode_id ORDER BY msg_idx) AS pos,
        '{"role":' || coalesce(CAST(to_json(role) AS VARCHAR), 'null')
        || ',"content":' || coalesce(CAST(to_json(content) AS VARCHAR), 'null')
        || coalesce(',"reasoning_content":' || CAST(to_json(reasoning_content) AS VARCHAR), '')
        || coalesce(',"tool_call_id":' || CAST(to_json(tool_call_id) AS VARCHAR), '')
        || coalesce(',"name":' || CAST(to_json(name) AS VARCHAR), '')
        || coalesce(',"tool_calls":' || CAST(json(tool_calls) AS VARCHAR), '')
        || '}' AS j
    FROM messages
    WHERE agent_id = 'main'
),

conversation AS MATERIALIZED (
    SELECT
        run_id, episode_id,
        string_agg(j, ',' ORDER BY msg_idx) AS conversation,  -- the list's items: the record adds the brackets
        -- the first step's `observation`: the second message's text when it is the user's
        max(CASE WHEN pos = 2 AND role = 'user' THEN content END) AS first_observation
    FROM msg
    GROUP BY run_id, episode_id
),

-- the observations the record embeds: each main step's environment answer (the first by call_id) and the
-- episode's terminal answer (the first over every agent)
picked AS (
    SELECT use, run_id, episode_id, step_idx, content, observation_state, payload, reward, done
    FROM (
        SELECT
            o.*,
            CASE WHEN observation_type = 'terminal' THEN 'terminal' ELSE 'env' END AS use,
            row_number() OVER (
                PARTITION BY run_id, episode_id, observation_type,
                             CASE WHEN observation_type = 'terminal' THEN NULL ELSE step_idx END
                ORDER BY agent_id, step_idx, call_id NULLS FIRST) AS rn
        FROM observations AS o  -- one scan for both: the payloads are the widest column read
        WHERE (agent_id = 'main' AND observation_type = 'environment') OR observation_type = 'terminal'
    ) AS t
    WHERE rn = 1
),

-- the writer's environment answer: the payload object with `observation` (content) and `observation_state` set,
-- plus reward and done when the row has no payload at all. The payload is parsed once (`got`: the three values
-- the writer reads or replaces, NULL when absent); a value the writer would replace by a different one is a
-- conflict (Python builds that episode).
env AS MATERIALIZED (
    SELECT
        use, run_id, episode_id, step_idx,
        CASE
            WHEN members = '' THEN base
            WHEN base = '{}' THEN '{' || members || '}'
            ELSE substr(base, 1, length(base) - 1) || ',' || members || '}'
        END AS env_json,
        -- the `observation` text of the answer (what the next step shows)
        coalesce(content, CASE WHEN json_type(got[1]) = 'VARCHAR' THEN json_extract_string(got[1], '$') END)
            AS observation_text,
        CASE WHEN payload IS NULL OR payload = '' THEN coalesce(done, false)
             ELSE coalesce(CAST(got[3] AS VARCHAR) = 'true', false) END AS done_true,
        (content IS NOT NULL AND got[1] IS NOT NULL AND CAST(got[1] AS VARCHAR) <> obs_json)
        OR (observation_state IS NOT NULL AND got[2] IS NOT NULL AND CAST(got[2] AS VARCHAR) <> observation_state
            AND CAST(got[2] AS VARCHAR) <> CAST(json(observation_state) AS VARCHAR)) AS conflict
    FROM (
        SELECT
            *,
            concat_ws(',',
                CASE WHEN content IS NOT NULL AND got[1] IS NULL THEN '"observation":' || obs_json END,
                CASE WHEN observation_state IS NOT NULL AND got[2] IS NULL
                     THEN '"observation_state":' || CAST(json(observation_state) AS VARCHAR) END,
                CASE WHEN payload IS NULL OR payload = '' THEN
                    '"reward":' || coalesce(CAST(to_json(reward) AS VARCHAR), 'null')
                    || ',"done":' || coalesce(CAST(to_json(done) AS VARCHAR), 'null') END
            ) AS members
        FROM (
            SELECT
                *,
                CAST(to_json(content) AS VARCHAR) AS obs_json,
                CASE WHEN base = '{}' THEN [NULL, NULL, NULL]
                     ELSE json_extract(base, ['$.observation', '$.observation_state', '$.done']) END AS got
            FROM (
                SELECT
                    *,
                    -- `_loads(payload) or {}`: a falsy JSON value counts as an empty object
                    CASE WHEN pj IS NULL OR pj IN ('{}', '[]', 'null', 'false', '0', '0.0', '-0.0', '""') THEN '{}'
                         ELSE pj END AS base
                FROM (
                    SELECT
                        *,
                        CASE WHEN payload IS NULL OR payload = '' THEN NULL ELSE CAST(json(payload) AS VARCHAR) END AS pj
                    FROM picked
                ) AS p
            ) AS b
        ) AS g
    ) AS m
),

-- texts the writer parses with strict JSON (orjson); DuckDB's reader is lenient, so such texts go to Python
calls AS (
    SELECT
        run_id, episode_id, step_idx,
        '[' || string_agg(
            '{"call_id":' || coalesce(CAST(to_json(call_id) AS VARCHAR), 'null')
            || ',"name":' || coalesce(CAST(to_json(tool_name) AS VARCHAR), 'null')
            || ',"arguments":' || CASE
                WHEN arguments IS NULL THEN '{}'
                WHEN json_valid(arguments) THEN CAST(json(arguments) AS VARCHAR)
                ELSE '{"_raw_arguments":' || CAST(to_json(arguments) AS VARCHAR) || '}' END
            || ',"raw_arguments":' || coalesce(CAST(to_json(arguments) AS VARCHAR), 'null') || '}',
            ',' ORDER BY call_idx) || ']' AS calls,
        first(action ORDER BY call_idx) FILTER (WHERE action IS NOT NULL) AS action,
        first(feedback_message ORDER BY call_idx) AS first_feedback,
        bool_or(coalesce(regexp_matches(arguments, 'NaN|Infinity|,\s*[\]}]|/[*/]'), false)) AS lenient
    FROM actions
    WHERE agent_id = 'main' AND action_type = 'tool_use'
    GROUP BY run_id, episode_id, step_idx
),

tool_defs AS (
    SELECT
        run_id, episode_id, schema_hash,
        any_value('{"type":"function","function":{"name":' || coalesce(CAST(to_json(name) AS VARCHAR), 'null')
                  || ',"description":' || coalesce(CAST(to_json(description) AS VARCHAR), 'null')
                  || ',"parameters":' || coalesce(CAST(json(parameters) AS VARCHAR), 'null') || '}}') AS j
    FROM tools
    WHERE agent_id = 'main'
    GROUP BY run_id, episode_id, schema_hash
),

step_hashes AS (
    SELECT run_id, episode_id, step_idx, unnest(hashes) AS schema_hash, generate_subscripts(hashes, 1) AS pos
    FROM (
        SELECT run_id, episode_id, step_idx, CAST(json(tool_schema_hashes) AS VARCHAR[]) AS hashes
        FROM steps
        WHERE agent_id = 'main' AND tool_schema_hashes IS NOT NULL AND json_type(tool_schema_hashes) = 'ARRAY'
    ) AS s
),

step_tools AS (
    SELECT h.run_id, h.episode_id, h.step_idx, '[' || string_agg(d.j, ',' ORDER BY h.pos) || ']' AS tools
    FROM step_hashes AS h
    JOIN tool_defs AS d ON d.run_id = h.run_id AND d.episode_id = h.episode_id AND d.schema_hash = h.schema_hash
    GROUP BY h.run_id, h.episode_id, h.step_idx
),

-- what each main step shows: the `observation` of the last earlier answer that has one (a window over these four
-- columns alone: over step_parts' wide rows it sorted the raw responses and payloads too)
shown AS (
    SELECT
        s.run_id, s.episode_id, s.step_idx,
        last_value(v.observation_text IGNORE NULLS) OVER (
            PARTITION BY s.run_id, s.episode_id ORDER BY s.step_idx ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
            AS observation
    FROM steps AS s
    LEFT JOIN env AS v ON v.use = 'env' AND v.run_id = s.run_id AND v.episode_id = s.episode_id AND v.step_idx = s.step_idx
    WHERE s.agent_id = 'main'
),

step_parts AS (
    SELECT
        s.run_id, s.episode_id, s.step_idx, s.protocol_error, s.policy_failure,
        s.content, s.reasoning, s.finish_reason, s.response_id, s.latency_ms, s.tokens_in, s.tokens_out,
        s.raw_response, c.calls, c.action, c.first_feedback, c.lenient, t.tools, v.env_json, v.done_true,
        coalesce(v.conflict, false) AS conflict,
        CASE WHEN s.metadata IS NULL THEN '{}' ELSE CAST(json(s.metadata) AS VARCHAR) END AS meta,
        CASE
            WHEN s.protocol_feedback IS NULL THEN NULL
            WHEN json_valid(s.protocol_feedback) THEN CAST(json(s.protocol_feedback) AS VARCHAR)
            ELSE CAST(to_json(s.protocol_feedback) AS VARCHAR)
        END AS fb,
        coalesce(regexp_matches(s.protocol_feedback, 'NaN|Infinity|,\s*[\]}]|/[*/]'), false) AS fb_lenient,
        coalesce(o.observation, cv.first_observation) AS observation
    FROM steps AS s
    LEFT JOIN calls AS c ON c.run_id = s.run_id AND c.episode_id = s.episode_id AND c.step_idx = s.step_idx
    LEFT JOIN step_tools AS t ON t.run_id = s.run_id AND t.episode_id = s.episode_id AND t.step_idx = s.step_idx
    LEFT JOIN env AS v ON v.use = 'env' AND v.run_id = s.run_id AND v.episode_id = s.episode_id AND v.step_idx = s.step_idx
    LEFT JOIN shown AS o ON o.run_id = s.run_id AND o.episode_id = s.episode_id AND o.step_idx = s.step_idx
    LEFT JOIN conversation AS cv ON cv.run_id = s.run_id AND cv.episode_id = s.episode_id
    WHERE s.agent_id = 'main'
),

step_json AS (
    SELECT
        run_id, episode_id, step_idx, env_json, done_true,
        conflict OR lenient OR fb_lenient OR model_extra AS fallback,
        concat(
            '{"step_index":', CAST(step_idx + 1 AS VARCHAR),
            ',"observation":', coalesce(CAST(to_json(observation) AS VARCHAR), 'null'),
            ',"tools":', coalesce(tools, '[]'),
            ',"model":{"content":', coalesce(CAST(to_json(content) AS VARCHAR), 'null'),
            ',"reasoning":', coalesce(CAST(to_json(reasoning) AS VARCHAR), 'null'),
            ',"tool_calls":', coalesce(calls, '[]'),
            ',"finish_reason":', coalesce(CAST(to_json(finish_reason) AS VARCHAR), 'null'),
            ',"usage":',
            CASE
            WHEN json_exists(meta, '$.usage') THEN CAST(json_extract(meta, '$.usage') AS VARCHAR)
            ELSE '{' || concat_ws(',', '"prompt_tokens":' || CAST(tokens_in AS VARCHAR),
                                  '"completion_tokens":' || CAST(tokens_out AS VARCHAR)) || '}' END,
            ',"response_id":', coalesce(CAST(to_json(response_id) AS VARCHAR), 'null'),
            ',"metadata":', coalesce(CAST(json_extract(meta, '$.metadata') AS VARCHAR), '{}'),
            ',"latency_ms":', coalesce(CAST(to_json(latency_ms) AS VARCHAR), 'null'),
            ',"protocol_error":', coalesce(pe, 'null'),
            ',"policy_failure":', coalesce(pf, 'null'),
            ',"raw_response":', coalesce(CAST(json(raw_response) AS VARCHAR), 'null'),
            '}',
            coalesce(',"protocol_error":' || pe || ',"protocol_feedback":' || coalesce(fb, 'null'), ''),
            coalesce(',"policy_failure":' || pf, ''),
            ',"action":', coalesce(CAST(to_json(action) AS VARCHAR), 'null'),
            ',"environment":', coalesce(env_json, 'null'),
            '}') AS j
    FROM (
        SELECT
            *,
            CASE WHEN protocol_error IS NOT NULL THEN
                '{"code":' || CASE WHEN json_type(fb) = 'OBJECT' AND json_exists(fb, '$.code')
                                   THEN CAST(json_extract(fb, '$.code') AS VARCHAR)
                                   ELSE CAST(to_json(protocol_error) AS VARCHAR) END
                || ',"message":' || CASE WHEN json_type(fb) = 'OBJECT' AND json_exists(fb, '$.message')
                                         THEN CAST(json_extract(fb, '$.message') AS VARCHAR)
                                         ELSE coalesce(CAST(to_json(first_feedback) AS VARCHAR), 'null') END
                || '}' END AS pe,
            CASE WHEN policy_failure IS NOT NULL THEN '{"code":' || CAST(to_json(policy_failure) AS VARCHAR) || '}' END AS pf,
            coalesce(json_exists(meta, '$.model_extra')
                     AND CAST(json_extract(meta, '$.model_extra') AS VARCHAR)
                         NOT IN ('{}', '[]', 'null', 'false', '0', '0.0', '""'), false) AS model_extra
        FROM step_parts
    ) AS p
),

step_list AS (
    SELECT
        run_id, episode_id,
        string_agg(j, ',' ORDER BY step_idx) AS steps,  -- the list's items (a bracketed copy cost ~5% of the query)
        -- the last step's answer when it ended the episode (the writer's `final` without a terminal row)
        first(CASE WHEN done_true THEN env_json END ORDER BY step_idx DESC) AS final_env,
        bool_or(fallback) AS fallback
    FROM step_json
    GROUP BY run_id, episode_id
),

skill_ids AS (
    SELECT run_id, episode_id, unnest(ids) AS skill_id, generate_subscripts(ids, 1) AS pos
    FROM (
        SELECT run_id, episode_id, CAST(json(skill_ids) AS VARCHAR[]) AS ids
        FROM ep
        WHERE skill_ids IS NOT NULL AND json_type(skill_ids) = 'ARRAY'
    ) AS e
),

skills AS (
    SELECT
        i.run_id, i.episode_id,
        '[' || string_agg(
            '{"skill_id":' || coalesce(CAST(to_json(k.skill_id) AS VARCHAR), 'null')
            || ',"content":' || coalesce(CAST(to_json(k.content) AS VARCHAR), 'null')
            || ',"version":' || coalesce(CAST(to_json(k.skill_version) AS VARCHAR), 'null')
            || ',"metadata":' || coalesce(CAST(json(k.metadata) AS VARCHAR), 'null')
            || ',"content_sha256":' || coalesce(CAST(to_json(k.content_hash) AS VARCHAR), 'null') || '}',
            ',' ORDER BY i.pos) || ']' AS skills
    FROM skill_ids AS i
    JOIN (SELECT run_id, episode_id, skill_id, any_value(skill_version) AS skill_version, any_value(content) AS content,
                 any_value(metadata) AS metadata, any_value(content_hash) AS content_hash
          FROM skills_selected GROUP BY run_id, episode_id, skill_id) AS k
        ON k.run_id = i.run_id AND k.episode_id = i.episode_id AND k.skill_id = i.skill_id
    GROUP BY i.run_id, i.episode_id
),

errors AS (
    SELECT
        f.run_id, f.episode_id,
        any_value('{"stage":' || coalesce(CAST(to_json(f.stage) AS VARCHAR), 'null')
                  || ',"type":' || coalesce(CAST(to_json(f.exception_type) AS VARCHAR), 'null')
                  || ',"message":' || coalesce(CAST(to_json(f.message) AS VARCHAR), 'null')
                  || coalesce(',"traceback":' || CAST(to_json(f.traceback) AS VARCHAR), '') || '}') AS error
    FROM failures AS f
    JOIN ep ON ep.run_id = f.run_id AND ep.episode_id = f.episode_id AND ep.attempt = f.attempt
    GROUP BY f.run_id, f.episode_id
),

-- the record's provenance: the ingested record's own (runs.provenance.v4.record_provenance), else the runs columns
provenance AS (
    SELECT
        run_id,
        CASE WHEN json_type(provenance, '$.v4') = 'OBJECT' AND json_exists(provenance, '$.v4.record_provenance')
             THEN CAST(json_extract(provenance, '$.v4.record_provenance') AS VARCHAR) END AS recorded,
        '{"provider":"openai_compatible","model":' || coalesce(CAST(to_json(model_name) AS VARCHAR), 'null')
        -- the server URLs the runner recorded (runs.provenance, credentials already stripped), else the config's
        || ',"base_url":' || coalesce(CAST(to_json(json_extract_string(provenance, '$.model.base_url')) AS VARCHAR),
                                      CASE WHEN json_type(config, '$.model') = 'OBJECT'
                                           THEN CAST(json_extract(config, '$.model.base_url') AS VARCHAR) END, 'null')
        || ',"checkpoint_id":' || coalesce(CAST(to_json(checkpoint_id) AS VARCHAR), 'null')
        -- sampling as the config holds it (model.sampling.*; older configs: model.*)
        || ',"sampling":{' || CASE WHEN json_type(config, '$.model') = 'OBJECT' THEN concat_ws(',',
            '"temperature":' || CAST(coalesce(json_extract(config, '$.model.sampling.temperature'),
                                              json_extract(config, '$.model.temperature')) AS VARCHAR),
            '"max_tokens":' || CAST(coalesce(json_extract(config, '$.model.sampling.max_tokens'),
                                             json_extract(config, '$.model.max_tokens')) AS VARCHAR),
            '"top_p":' || CAST(coalesce(json_extract(config, '$.model.sampling.top_p'),
                                        json_extract(config, '$.model.top_p')) AS VARCHAR),
            '"send_seed":' || CAST(json_extract(config, '$.model.send_seed') AS VARCHAR),
            '"tool_choice":' || CAST(json_extract(config, '$.model.tool_choice') AS VARCHAR),
            '"extra_body":' || CAST(json_extract(config, '$.model.extra_body') AS VARCHAR)) ELSE '' END || '}}' AS model,
        ',"base_url":' || coalesce(CAST(to_json(coalesce(json_extract_string(provenance, '$.environment.base_url'),
                                                         json_extract_string(config, '$.environment.url'),
                                                         environment_mode)) AS VARCHAR), 'null') AS environment_url,
        ',"environment_version":' || coalesce(CAST(to_json(environment_version) AS VARCHAR), 'null')
        || ',"observation_version":' || coalesce(CAST(to_json(observation_version) AS VARCHAR), 'null') AS versions,
        '{"prompt_version":' || coalesce(CAST(to_json(prompt_version) AS VARCHAR), 'null') AS prompt,
        CASE WHEN coalesce(skill_bank_hash, '') = '' THEN '{"provider":"none"}'
             ELSE '{"provider":"shopsim-wh-skill-bank","sha256":' || CAST(to_json(skill_bank_hash) AS VARCHAR) || '}'
        END AS skills,
        '{"max_steps":' || coalesce(CAST(action_limit AS VARCHAR), 'null')
        || ',"action_protocol":"openai-function-tools-repair-v3","adapter":'
        || coalesce(CAST(to_json('shopsim-wh ' || getvariable('export_tool_version')) AS VARCHAR), 'null') || '}' AS runtime
    FROM runs
    WHERE run_id IN (SELECT run_id FROM export_scope)
),

-- Python's datetime.isoformat(): microseconds only when not zero, the offset as +HH:MM
stamps AS (
    SELECT
        run_id, episode_id,
        CASE WHEN started_at IS NULL THEN NULL ELSE strftime(started_at, '%Y-%m-%dT%H:%M:%S')
            || CASE WHEN strftime(started_at, '%f') = '000000' THEN '' ELSE '.' || strftime(started_at, '%f') END
            || CASE WHEN timezone(started_at) >= 0 THEN '+' ELSE '-' END
            || printf('%02d:%02d', abs(timezone(started_at)) // 3600, abs(timezone(started_at)) % 3600 // 60) END AS started,
        CASE WHEN finished_at IS NULL THEN NULL ELSE strftime(finished_at, '%Y-%m-%dT%H:%M:%S')
            || CASE WHEN strftime(finished_at, '%f') = '000000' THEN '' ELSE '.' || strftime(finished_at, '%f') END
            || CASE WHEN timezone(finished_at) >= 0 THEN '+' ELSE '-' END
            || printf('%02d:%02d', abs(timezone(finished_at)) // 3600, abs(timezone(finished_at)) % 3600 // 60) END AS ended
    FROM ep
),

assembled AS (
    SELECT
        ep.*,
        CASE
            WHEN ep.source_extra IS NOT NULL THEN 'residual'
            WHEN coalesce(sl.fallback, false) THEN 'step'
            WHEN coalesce(term.conflict, false) THEN 'payload'
        END AS record_fallback,
        concat(
            '{"schema_version":"shopsimrl-episode-v4","episode_id":', CAST(to_json(
            CASE WHEN ep.episode_id LIKE 'task-%' AND ep.episode_id LIKE '%\_\_sample-%' ESCAPE '\'
                      AND ep.task_id IS NOT NULL AND ep.sample_id IS NOT NULL
                 THEN 'task-' || printf('%06d', ep.task_id) || '__sample-' || printf('%03d', ep.sample_id)
                 ELSE ep.episode_id END) AS VARCHAR),
            ',"status":', coalesce(CAST(to_json(ep.status) AS VARCHAR), 'null'),
            ',"job":{"task_id":', coalesce(CAST(ep.task_id AS VARCHAR), 'null'),
            ',"sample_id":', coalesce(CAST(ep.sample_id AS VARCHAR), 'null'),
            ',"seed":', coalesce(CAST(ep.seed AS VARCHAR), 'null'),
            ',"split":', coalesce(CAST(to_json(ep.episode_split) AS VARCHAR), 'null'),
            '}',
            ',"provenance":', coalesce(pr.recorded,
            '{"model":' || coalesce(pr.model, '{"provider":"openai_compatible","model":null,"base_url":null,"checkpoint_id":null,"sampling":{}}')
            || ',"environment":{"adapter":"shopsimulator_http"' || coalesce(pr.environment_url, ',"base_url":null')
            || ',"persona":' || CASE WHEN ep.persona IS NOT NULL THEN 'true' ELSE 'false' END
            || ',"interaction_mode":"single_turn"'
            || coalesce(pr.versions, ',"environment_version":null,"observation_version":null') || '}'
            || ',"prompt":' || coalesce(pr.prompt, '{"prompt_version":null')
            || ',"system_prompt_sha256":' || coalesce(CAST(to_json(ep.prompt_hash) AS VARCHAR), 'null') || '}'
            || ',"skills":' || coalesce(pr.skills, '{"provider":"none"}')
            || ',"runtime":' || coalesce(pr.runtime, '{"max_steps":null,"action_protocol":"openai-function-tools-repair-v3","adapter":'
                                         || coalesce(CAST(to_json('shopsim-wh ' || getvariable('export_tool_version')) AS VARCHAR), 'null') || '}')
            || '}'),
            ',"started_at":', coalesce(CAST(to_json(st.started) AS VARCHAR), 'null'),
            ',"ended_at":', coalesce(CAST(to_json(st.ended) AS VARCHAR), 'null'),
            ',"duration_ms":', coalesce(CAST(to_json(ep.duration_s * 1000) AS VARCHAR), 'null'),
            ',"reset":', coalesce(CAST(json(ep.reset_payload) AS VARCHAR), 'null'),
            ',"selected_skills":', coalesce(sk.skills, '[]'),
            ',"conversation":[', coalesce(cv.conversation, ''),
            '],"steps":[', coalesce(sl.steps, ''),
            ']',
            ',"final":',
            CASE
            WHEN term.env_json IS NOT NULL THEN term.env_json
            WHEN sl.final_env IS NOT NULL THEN sl.final_env
            WHEN ep.done IS NULL AND ep.episode_reward IS NULL THEN 'null'
            ELSE '{"done":' || coalesce(CAST(to_json(ep.done) AS VARCHAR), 'null')
                || ',"reward":' || coalesce(CAST(to_json(ep.episode_reward) AS VARCHAR), 'null')
                || ',"reward_detail":' || CASE
                    WHEN ep.reward_detail IS NULL THEN '{}'
                    WHEN CAST(json(ep.reward_detail) AS VARCHAR) IN ('{}', '[]', 'null', 'false', '0', '0.0', '-0.0', '""') THEN '{}'
                    ELSE CAST(json(ep.reward_detail) AS VARCHAR) END
                || ',"purchase":' || CASE WHEN coalesce(ep.purchase_asin, '') = '' THEN '{}'
                                          ELSE '{"asin":' || CAST(to_json(ep.purchase_asin) AS VARCHAR) || '}' END
                || ',"termination_reason":' || coalesce(CAST(to_json(ep.termination_reason) AS VARCHAR), 'null') || '}'
            END,
            ',"error":', coalesce(er.error, 'null'),
            '}') AS text
    FROM ep
    LEFT JOIN provenance AS pr ON pr.run_id = ep.run_id
    LEFT JOIN stamps AS st ON st.run_id = ep.run_id AND st.episode_id = ep.episode_id
    LEFT JOIN skills AS sk ON sk.run_id = ep.run_id AND sk.episode_id = ep.episode_id
    LEFT JOIN conversation AS cv ON cv.run_id = ep.run_id AND cv.episode_id = ep.episode_id
    LEFT JOIN step_list AS sl ON sl.run_id = ep.run_id AND sl.episode_id = ep.episode_id
    LEFT JOIN errors AS er ON er.run_id = ep.run_id AND er.episode_id = ep.episode_id
    LEFT JOIN env AS term ON term.use = 'terminal' AND term.run_id = ep.run_id AND term.episode_id = ep.episode_id
)

SELECT
    md5(run_id || '/' || episode_id || ':shopsimrl-v4') AS sample_id,
    run_id, episode_id, task_id, status, reward, r_success, success, import_fidelity, source_format, split, experiment,
    record_fallback,
    CASE WHEN record_fallback IS NULL THEN text END AS record
FROM assembled;
