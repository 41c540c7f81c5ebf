-- Scalar helpers of the exports layer: message JSON in the OpenAI shape trainers and chat templates expect.
-- grain: scalar macros (one value per call).
--
-- export_tool_calls(tool_calls): a JSON text list of OpenAI tool calls -> JSON text of the list whose
--   function.arguments is an object: arguments stored as JSON text are parsed when they hold a JSON object
--   (chat templates write `arguments | tojson`, so text would be quoted twice); anything else (invalid JSON
--   of a protocol-error turn, a non-object) stays as it was.
-- export_strip_persona(content): a system prompt without its persona section (`用户个人文档：` + one line of
--   JSON, the layout of shopsim_wh/rollout/prompts.py that ShopSimRL v4 records share).
-- export_message(role, content, reasoning_content, tool_calls, tool_call_id, name): one message object;
--   keys whose value is NULL are left out, tool_calls embedded as JSON (through export_tool_calls).
-- est_tokens_of(content, tool_calls, reasoning_content): the documented estimate of sql/ir/ir_context.sql,
--   ceil(chars / 4) over the three fields plus 4 for role and framing.
-- Messages are assembled as text (to_json escapes each value): re-serialising JSON per message costs ~10x more.
-- DuckDB-specific: macros, lambdas, json_transform, to_json.
CREATE OR REPLACE MACRO export_arguments(a) AS  -- a: the JSON value of function.arguments, as text
    CASE
        WHEN a IS NULL THEN 'null'
        WHEN json_type(a) = 'VARCHAR' AND json_valid(a ->> '$') AND json_type(a ->> '$') = 'OBJECT' THEN a ->> '$'
        ELSE a
    END;

CREATE OR REPLACE MACRO export_tool_calls(tc) AS  -- JSON text; NULL when tc holds no list of calls
    CASE WHEN tc IS NULL OR NOT json_valid(tc) OR json_type(tc) <> 'ARRAY' THEN NULL ELSE
        '[' || array_to_string(list_transform(
            json_transform(tc, '[{"id": "VARCHAR", "type": "VARCHAR", "function": {"name": "VARCHAR", "arguments": "JSON"}}]'),
            lambda x: '{"id":' || coalesce(CAST(to_json(x.id) AS VARCHAR), 'null')
                || ',"type":' || CAST(to_json(coalesce(x.type, 'function')) AS VARCHAR)
                || ',"function":{"name":' || coalesce(CAST(to_json(x.function.name) AS VARCHAR), 'null')
                || ',"arguments":' || export_arguments(CAST(x.function.arguments AS VARCHAR)) || '}}'), ',') || ']'
    END;

CREATE OR REPLACE MACRO export_strip_persona(content) AS
    regexp_replace(regexp_replace(content, '(\n\n)?用户个人文档：\n[^\n]*', '', 'g'), '^\n+', '');

CREATE OR REPLACE MACRO export_message(role, content, reasoning_content, tool_calls, tool_call_id, name) AS
    CAST('{"role":' || CAST(to_json(role) AS VARCHAR)
         || ',"content":' || coalesce(CAST(to_json(content) AS VARCHAR), 'null')
         || CASE WHEN reasoning_content IS NOT NULL
                 THEN ',"reasoning_content":' || CAST(to_json(reasoning_content) AS VARCHAR) ELSE '' END
         || coalesce(',"tool_calls":' || export_tool_calls(tool_calls), '')
         || CASE WHEN tool_call_id IS NOT NULL
                 THEN ',"tool_call_id":' || CAST(to_json(tool_call_id) AS VARCHAR) ELSE '' END
         || CASE WHEN name IS NOT NULL THEN ',"name":' || CAST(to_json(name) AS VARCHAR) ELSE '' END
         || '}' AS JSON);

CREATE OR REPLACE MACRO est_tokens_of(content, tool_calls, reasoning_content) AS
    CAST(ceil((length(coalesce(content, '')) + length(coalesce(tool_calls, ''))
               + length(coalesce(reasoning_content, ''))) / 4.0) AS BIGINT) + 4;
