-- export: reasoning-requests
-- grain: one row per decision (model turn) of any agent that made exactly one well-formed tool call
-- trl: -
-- sample: messages
-- filters: status, reward, r_success, success, import_fidelity, source_format, agent_role, est_tokens, action_name
-- default-where: status = 'completed' AND success
-- description: teacher requests for trajectory-grounded synthetic reasoning: state, the recorded action and the outcome as a constraint; `shopsim-wh synth-reasoning` sends them
-- params: export_window, export_max_tokens
--
-- Columns
--   messages        JSON[] the chat request for the teacher: a system message (the task: write the reasoning
--                   that leads to exactly the recorded action) and a user message with the tools offered, the
--                   conversation the agent saw (export_decisions.prompt: --window / --max-tokens apply), the
--                   action it took and the outcome, stated as a constraint only ("do not mention it")
--   request_hash    md5 of `messages` as text: the idempotency key of synth-reasoning (with the teacher's
--                   fingerprint); identical decisions of two rollouts share one request
--   action_name, action_arguments (JSON object)  the recorded call the answer must reproduce
--   state, action, tools  the decision's prompt / completion / offered schemas (sft-reasoning reuses them)
-- Privacy: built from export_decisions under the default flags' rules (no recorded reasoning, no persona), and
-- export_episodes carries nothing derived from the private goal: a teacher never sees either.
-- Decisions whose response broke the tool protocol or made several calls get no request.
-- DuckDB-specific: list_transform lambdas, array_to_string, JSON paths.
CREATE OR REPLACE VIEW export_reasoning_requests AS
WITH candidates AS (
    SELECT
        d.*,
        d.completion[1] -> '$.tool_calls[0].function' AS call
    FROM export_decisions AS d
    WHERE d.n_calls = 1 AND d.protocol_error IS NULL AND d.policy_failure IS NULL AND d.tool_name IS NOT NULL
      AND json_type(d.completion[1] -> '$.tool_calls[0].function.arguments') = 'OBJECT'
),

rendered AS (
    SELECT
        c.*,
        c.call ->> 'name' AS action_name,
        c.call -> 'arguments' AS action_arguments,
        coalesce(array_to_string(list_transform(c.tools, lambda x:
            '- ' || (x -> 'function' ->> 'name') || ': ' || coalesce(json_extract_string(x, '$.function.description'), '')), chr(10)),
            '') AS tools_text,
        array_to_string(list_transform(c.prompt, lambda m:
            '[' || (m ->> 'role') || ']' || coalesce(' ' || (m ->> 'content'), '')
            || coalesce(' -> called ' || array_to_string(list_transform(CAST(m -> 'tool_calls' AS JSON[]), lambda k:
                (k -> 'function' ->> 'name') || ' ' || CAST(k -> 'function' -> 'arguments' AS VARCHAR)), ', '), '')),
            chr(10) || chr(10)) AS context_text,
        CASE
            WHEN c.success THEN 'The episode this decision belongs to ended in success'
            WHEN c.reward IS NULL THEN 'The episode this decision belongs to ended without a recorded success'
            ELSE 'The episode this decision belongs to did not succeed (reward ' || CAST(round(c.reward, 3) AS VARCHAR) || ')'
        END || '. Use this only as a constraint on your reasoning: do not mention the outcome, and use only what '
             || 'the agent could see at this point.' AS outcome
    FROM candidates AS c
),

requests AS (
    SELECT
        r.*,
        [json_object('role', 'system', 'content',
            'You write the reasoning an agent had before one action it took, for training data. You are given '
            || 'the tools it was offered, the conversation it saw, the action it took next and a constraint. '
            || 'Write the reasoning in the agent''s own voice, grounded only in what it saw, that leads to exactly '
            || 'that action. Reply with one JSON object and nothing else: {"reasoning": "...", "action": {"name": '
            || '"<tool name>", "arguments": {...}}}, where the action is exactly the one given.'),
         json_object('role', 'user', 'content',
            '## Tools offered' || chr(10) || r.tools_text || chr(10) || chr(10)
            || '## Conversation the agent saw (oldest first)' || chr(10) || r.context_text || chr(10) || chr(10)
            || '## Action the agent took next' || chr(10) || r.action_name || ' '
            || CAST(r.action_arguments AS VARCHAR) || chr(10) || chr(10)
            || '## Constraint' || chr(10) || r.outcome)] AS messages
    FROM rendered AS r
),

final AS (
    SELECT
        md5('reasoning-requests/' || decision_id) AS sample_id,
        md5(CAST(messages AS VARCHAR)) AS request_hash,
        run_id,
        episode_id,
        task_id,
        agent_id,
        agent_role,
        step_idx,
        messages,
        action_name,
        action_arguments,
        outcome,
        prompt AS state,
        completion AS action,
        tools,
        status,
        reward,
        r_success,
        success,
        import_fidelity,
        source_format,
        split,
        est_tokens
    FROM requests
)

SELECT * FROM final;
