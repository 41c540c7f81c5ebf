-- export: verl-sft
-- grain: one row per agent trajectory (main agents and sub-agents are separate rows)
-- trl: conversational language modeling (messages + tools; per-message trainable)
-- sample: messages, tools
-- filters: status, reward, r_success, r_strict, success, import_fidelity, source_format, agent_role, depth, est_tokens, n_turns, split, experiment, task_id
-- default-where: status = 'completed' AND success
-- params: export_include_reasoning, export_include_persona
-- description: verl's multi-turn SFT parquet (MultiTurnSFTDataset): the whole conversation of one agent as typed messages with a per-message trainable flag (and loss_mask 0/1), and the tools it was offered, a name once
-- Columns (docs/export_rl.md, "verl multi-turn SFT")
--   messages  STRUCT(role VARCHAR, content VARCHAR, reasoning_content VARCHAR, tool_calls STRUCT(id VARCHAR,
--             type VARCHAR, function STRUCT(name VARCHAR, arguments JSON))[], tool_call_id VARCHAR,
--             trainable BOOLEAN, loss_mask INTEGER)[]: export_messages in order (the conversation as the model
--             saw it; a key a message lacks is NULL). trainable = the message is the assistant's, its episode
--             succeeded (export_episodes.success) and its turn kept the tool protocol (steps.protocol_error and
--             policy_failure NULL); loss_mask = 1 where trainable, else 0. verl <= 0.9 trains every assistant
--             message and reads neither field; `trainable` is the field verl#5316 / PR #5472 reads, `loss_mask`
--             the per-message 0/1 its reviewers asked for. reasoning_content only with --include-reasoning.
--   tools     STRUCT(type VARCHAR, function STRUCT(name VARCHAR, description VARCHAR, parameters JSON))[]:
--             every tool the agent was offered, by name, a name once (export_agent_tools: ShopSimRL's per-page
--             `click` schemas merged, their enums unioned)
--   arguments and parameters are Parquet JSON (free-form objects: a struct would give every call the keys of
--   every other call, as nulls): `datasets` decodes them to dicts; pandas (verl's reader) hands them over as
--   JSON text (OpenAI's wire format: templates that test `arguments is string` print it as is)
--   the rest as sft-trajectory: lineage and filter columns, est_tokens, n_turns
-- DuckDB-specific: json_transform, list(... ORDER BY ...), struct_pack, JSON.
CREATE OR REPLACE VIEW export_verl_sft AS
WITH typed AS (
    SELECT
        m.run_id, m.episode_id, m.agent_id, m.ord, m.from_step, m.est_tokens,
        json_transform(m.message, '{"role": "VARCHAR", "content": "VARCHAR", "reasoning_content": "VARCHAR",
            "tool_calls": [{"id": "VARCHAR", "type": "VARCHAR",
                            "function": {"name": "VARCHAR", "arguments": "JSON"}}],
            "tool_call_id": "VARCHAR"}') AS msg
    FROM export_messages AS m
),

turns AS (
    SELECT run_id, episode_id, agent_id, step_idx, protocol_error IS NULL AND policy_failure IS NULL AS kept_protocol
    FROM steps
    WHERE run_id IN (SELECT run_id FROM export_scope)
),

flagged AS (
    SELECT
        t.run_id, t.episode_id, t.agent_id, t.ord, t.from_step, t.est_tokens, t.msg,
        t.msg.role = 'assistant' AND e.success AND coalesce(s.kept_protocol, true) AS trainable
    FROM typed AS t
    JOIN export_episodes AS e ON e.run_id = t.run_id AND e.episode_id = t.episode_id
    LEFT JOIN turns AS s
        ON s.run_id = t.run_id AND s.episode_id = t.episode_id AND s.agent_id = t.agent_id AND s.step_idx = t.from_step
),

conv AS (
    SELECT
        run_id, episode_id, agent_id,
        list(struct_pack(role := msg.role, content := msg.content, reasoning_content := msg.reasoning_content,
                         tool_calls := msg.tool_calls, tool_call_id := msg.tool_call_id, trainable := trainable,
                         loss_mask := CAST(trainable AS INTEGER))
             ORDER BY ord) AS messages,
        sum(est_tokens) AS est_tokens,
        count(DISTINCT from_step) AS n_turns
    FROM flagged
    GROUP BY run_id, episode_id, agent_id
),

agent_tools AS (  -- a name once: its schemas merged (export_agent_tools; docs/export.md, "Tool lists")
    SELECT
        run_id, episode_id, agent_id,
        list({'type': 'function',
              'function': {'name': name, 'description': description, 'parameters': CAST(parameters AS JSON)}}
             ORDER BY name) AS tools
    FROM export_agent_tools
    GROUP BY run_id, episode_id, agent_id
)

SELECT
    md5(c.run_id || '/' || c.episode_id || '/' || c.agent_id || ':verl-sft') AS sample_id,
    c.messages,
    coalesce(t.tools, []) AS tools,
    c.run_id, c.episode_id, e.task_id, c.agent_id, a.agent_role, a.depth,
    e.status, e.reward, e.r_success, e.r_strict, e.success, e.import_fidelity, e.source_format, e.split, e.experiment,
    CAST(c.est_tokens AS BIGINT) AS est_tokens, c.n_turns
FROM conv AS c
JOIN export_episodes AS e ON e.run_id = c.run_id AND e.episode_id = c.episode_id
JOIN export_agents AS a ON a.run_id = c.run_id AND a.episode_id = c.episode_id AND a.agent_id = c.agent_id
LEFT JOIN agent_tools AS t ON t.run_id = c.run_id AND t.episode_id = c.episode_id AND t.agent_id = c.agent_id;
