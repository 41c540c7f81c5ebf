-- ir_steps: the Trajectory IR (seed 001 part 3 §3): one decision of any agent with its state, action,
-- observation, reasoning, step reward and episode outcome.
-- grain: one row per model turn (decision) of any agent, final attempt
-- key:   (run_id, trace_id, agent_id, step_idx)        -- trace_id = episode_id
--
-- Both sub-agent views hold at once: a parent's `delegate` step has the child's summary as its observation
-- (observation_type = 'subagent_summary', `spawned_agent_id` names the child), and the child's own steps are
-- rows of their own agent_id, linked back by `parent_agent_id` / `depth`.
--
-- Columns
--   state_ref    struct identifying the context of the decision: the agent's first `prompt_msg_count`
--                messages plus the tool set `tools_hash` (see ir_context for the messages themselves)
--   action       struct {action_type (tool_use | delegate | answer | terminate), tool_name, arguments (JSON
--                text), call_id, action (canonical), tool_type, valid, feedback_code} of the turn's first call;
--                NULL when the response made no call (protocol_error = 'no_tool_call')
--   observation  struct {observation_type (environment | tool_result | subagent_summary | hook_context |
--                error), content, call_id, is_error}: what answered the first call (or the feedback to a
--                response without a call)
--   calls        every call of the turn (parallel tool calls) with its own observation, in call order
--   hook_context injected hook / system-reminder text delivered after this turn
--   reward       reward reported at this step (0 where none; NULL when the episode has no reward at all)
--   outcome      struct of the episode's outcome (status, reward, r_success, r_strict, right_product,
--                termination_reason)
-- Each base view is read once and grouped per step; calls are paired with their observations (matching
-- call_id; a terminate carries no call id on either side) inside the per-step lists, which keeps a
-- single-episode lookup to five filtered scans.
-- DuckDB-specific: struct_pack, list(... ORDER BY ...), lambdas, list indexing (structs and lists are the point).
CREATE OR REPLACE VIEW ir_steps AS
WITH step_rows AS (
    SELECT
        run_id, episode_id, agent_id, step_idx, seq, page, observation_state, prompt_msg_count, tools_hash,
        reasoning, content, finish_reason, protocol_error, policy_failure, model, tokens_in, tokens_out,
        latency_ms, started_at
    FROM steps
),

step_calls AS (
    SELECT
        run_id, episode_id, agent_id, step_idx,
        list(struct_pack(
            call_idx := call_idx, call_id := call_id, action_type := action_type, tool_name := tool_name,
            arguments := arguments, action := action, tool_type := tool_type, valid := action_valid,
            feedback_code := feedback_code
        ) ORDER BY call_idx) AS calls
    FROM actions
    GROUP BY run_id, episode_id, agent_id, step_idx
),

step_observations AS (
    SELECT
        run_id, episode_id, agent_id, step_idx,
        list(struct_pack(
            observation_type := observation_type, content := content, call_id := call_id, is_error := is_error
        ) ORDER BY call_id) FILTER (WHERE coalesce(observation_type, '') <> 'hook_context') AS answers,
        string_agg(content, chr(10) ORDER BY call_id) FILTER (WHERE observation_type = 'hook_context') AS hook_context,
        max(reward) AS step_reward,
        coalesce(bool_or(done), false) AS is_terminal
    FROM observations
    GROUP BY run_id, episode_id, agent_id, step_idx
),

episode_agents AS (
    SELECT
        run_id, episode_id,
        list(struct_pack(
            agent_id := agent_id, parent_agent_id := parent_agent_id, agent_role := agent_role, depth := depth,
            spawned_by_call_id := spawned_by_call_id)) AS agents
    FROM agents
    GROUP BY run_id, episode_id
),

joined AS (
    SELECT
        s.*,
        list_transform(coalesce(c.calls, []), lambda x: struct_pack(
            call_idx := x.call_idx,
            action := struct_pack(
                action_type := x.action_type, tool_name := x.tool_name, arguments := x.arguments,
                call_id := x.call_id, action := x.action, tool_type := x.tool_type, valid := x.valid,
                feedback_code := x.feedback_code),
            observation := list_filter(coalesce(o.answers, []), lambda y: y.call_id IS NOT DISTINCT FROM x.call_id)[1],
            spawned_agent_id := list_filter(coalesce(g.agents, []), lambda z: z.spawned_by_call_id = x.call_id)[1].agent_id
        )) AS paired_calls,
        list_filter(coalesce(o.answers, []), lambda y: NOT list_contains(
            list_transform(coalesce(c.calls, []), lambda x: coalesce(x.call_id, '')), coalesce(y.call_id, ''))) AS loose,
        list_filter(coalesce(g.agents, []), lambda z: z.agent_id = s.agent_id)[1] AS agent,
        o.hook_context,
        o.step_reward,
        o.is_terminal
    FROM step_rows AS s
    LEFT JOIN step_calls AS c
        ON c.run_id = s.run_id AND c.episode_id = s.episode_id AND c.agent_id = s.agent_id AND c.step_idx = s.step_idx
    LEFT JOIN step_observations AS o
        ON o.run_id = s.run_id AND o.episode_id = s.episode_id AND o.agent_id = s.agent_id AND o.step_idx = s.step_idx
    LEFT JOIN episode_agents AS g
        ON g.run_id = s.run_id AND g.episode_id = s.episode_id
),

final AS (
    SELECT
        j.run_id,
        j.episode_id AS trace_id,
        j.episode_id,
        j.agent_id,
        CASE WHEN j.agent IS NOT NULL THEN j.agent.parent_agent_id WHEN j.agent_id = 'main' THEN NULL ELSE 'main' END
            AS parent_agent_id,
        coalesce(j.agent.agent_role, CASE WHEN j.agent_id = 'main' THEN 'main' ELSE 'unknown' END) AS agent_role,
        coalesce(j.agent.depth, CASE WHEN j.agent_id = 'main' THEN 0 ELSE 1 END) AS depth,
        j.step_idx,
        j.seq,
        struct_pack(
            run_id := j.run_id, episode_id := j.episode_id, agent_id := j.agent_id, seq := j.seq,
            prompt_msg_count := j.prompt_msg_count, tools_hash := j.tools_hash) AS state_ref,
        j.page,
        j.observation_state,
        j.paired_calls[1].action AS action,
        CASE WHEN len(j.paired_calls) > 0 THEN j.paired_calls[1].observation ELSE j.loose[1] END AS observation,
        j.paired_calls[1].spawned_agent_id AS spawned_agent_id,
        len(j.paired_calls) AS n_calls,
        j.paired_calls AS calls,
        j.hook_context,
        j.reasoning,
        j.content,
        j.finish_reason,
        j.protocol_error,
        j.policy_failure,
        j.model,
        j.tokens_in,
        j.tokens_out,
        j.latency_ms,
        j.started_at,
        CASE WHEN e.reward IS NULL THEN NULL ELSE coalesce(j.step_reward, CAST(0 AS DOUBLE)) END AS reward,
        coalesce(j.is_terminal, false) AS is_terminal,
        struct_pack(
            status := e.status, reward := e.reward, r_success := e.r_success, r_strict := e.r_strict,
            right_product := e.right_product, termination_reason := e.termination_reason) AS outcome,
        e.task_id,
        e.sample_id
    FROM joined AS j
    LEFT JOIN episodes AS e
        ON e.run_id = j.run_id AND e.episode_id = j.episode_id
)

SELECT * FROM final;
