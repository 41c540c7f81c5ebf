-- protocol_codes: every protocol-error and policy-failure code a runtime reports, with its error label.
-- grain: one row per code. key: code
-- GENERATED from shopsim_wh/core/protocol_codes.py by `python -m shopsim_wh.core.protocol_codes`; do not edit.
-- kind: protocol (steps.protocol_error, a repaired turn) or policy (steps.policy_failure, the episode is
-- terminated); label: the taxonomy code error_labels gives it (a code not listed: protocol_other /
-- policy_other); emitted_by: where shopsim-wh emits it (empty: a generic name of other traces);
-- original: where ShopSimRL's runtime writes it. Portable SQL (VALUES with a column list).
CREATE OR REPLACE VIEW protocol_codes AS
WITH codes (code, kind, label, emitted_by, original, meaning) AS (
    VALUES
        ('invalid_json_response', 'protocol', 'protocol_malformed_response', 'shopsim_wh/rollout/model.py ChatModel.generate', 'shopsimrl/model.py OpenAICompatibleChatModel.generate', 'the 200 answer''s body is not JSON'),
        ('invalid_response_body', 'protocol', 'protocol_malformed_response', 'shopsim_wh/rollout/model.py parse_response', 'shopsimrl/model.py OpenAICompatibleChatModel._parse_response', 'the answer is not a JSON object'),
        ('missing_choices', 'protocol', 'protocol_malformed_response', 'shopsim_wh/rollout/model.py parse_response', 'shopsimrl/model.py OpenAICompatibleChatModel._parse_response', 'the answer has no choices'),
        ('invalid_choice', 'protocol', 'protocol_malformed_response', 'shopsim_wh/rollout/model.py parse_response', 'shopsimrl/model.py OpenAICompatibleChatModel._parse_response', 'the first choice is not an object'),
        ('invalid_message', 'protocol', 'protocol_malformed_response', 'shopsim_wh/rollout/model.py parse_response', 'shopsimrl/model.py OpenAICompatibleChatModel._parse_response', 'the choice has no message object'),
        ('invalid_tool_calls', 'protocol', 'protocol_malformed_tool_call', 'shopsim_wh/rollout/model.py parse_response', 'shopsimrl/model.py OpenAICompatibleChatModel._parse_response', 'tool_calls is not a list'),
        ('invalid_tool_call', 'protocol', 'protocol_malformed_tool_call', 'shopsim_wh/rollout/model.py parse_response', 'shopsimrl/model.py OpenAICompatibleChatModel._parse_response', 'a tool call is not an object of type function'),
        ('missing_function', 'protocol', 'protocol_malformed_tool_call', 'shopsim_wh/rollout/model.py parse_response', 'shopsimrl/model.py OpenAICompatibleChatModel._parse_response', 'a tool call has no function object'),
        ('missing_tool_call_id', 'protocol', 'protocol_malformed_tool_call', 'shopsim_wh/rollout/model.py parse_response', 'shopsimrl/model.py OpenAICompatibleChatModel._parse_response', 'a tool call has no id'),
        ('missing_tool_name', 'protocol', 'protocol_malformed_tool_call', 'shopsim_wh/rollout/model.py parse_response', 'shopsimrl/model.py OpenAICompatibleChatModel._parse_response', 'a tool call has no function name'),
        ('invalid_arguments_type', 'protocol', 'protocol_invalid_arguments', 'shopsim_wh/rollout/model.py parse_response', 'shopsimrl/model.py OpenAICompatibleChatModel._parse_response', 'a call''s arguments are not a JSON string'),
        ('invalid_arguments_json', 'protocol', 'protocol_invalid_arguments', 'shopsim_wh/rollout/model.py parse_response', 'shopsimrl/model.py OpenAICompatibleChatModel._parse_response', 'a call''s arguments are not valid JSON'),
        ('invalid_arguments_object', 'protocol', 'protocol_invalid_arguments', 'shopsim_wh/rollout/model.py parse_response', 'shopsimrl/model.py OpenAICompatibleChatModel._parse_response', 'a call''s arguments do not decode to a JSON object'),
        ('unavailable_tool', 'protocol', 'protocol_unknown_tool', 'shopsim_wh/rollout/model.py parse_response', 'shopsimrl/model.py OpenAICompatibleChatModel._parse_response', 'a call names a tool the page does not offer'),
        ('generation_length', 'policy', 'generation_length', 'shopsim_wh/rollout/model.py parse_response', 'shopsimrl/model.py OpenAICompatibleChatModel._parse_response', 'finish_reason length without exactly one call: the episode is terminated'),
        ('tool_call_count', 'protocol', 'protocol_tool_call_count', 'shopsim_wh/rollout/model.py parse_response; shopsim_wh/rollout/runtime.py check_turn', 'shopsimrl/model.py OpenAICompatibleChatModel._parse_response; shopsimrl/runtime.py AgentRuntime.run', 'not exactly one tool call (none, or several)'),
        ('mixed_content', 'protocol', 'protocol_mixed_content', 'shopsim_wh/rollout/model.py parse_response; shopsim_wh/rollout/runtime.py check_turn', 'shopsimrl/model.py OpenAICompatibleChatModel._parse_response; shopsimrl/runtime.py AgentRuntime.run', 'visible text beside the tool call'),
        ('empty_response', 'protocol', 'protocol_empty_response', 'shopsim_wh/rollout/model.py parse_response', 'shopsimrl/model.py OpenAICompatibleChatModel._parse_response', 'neither text nor a tool call (when no tool is required)'),
        ('invalid_tool_arguments', 'protocol', 'protocol_invalid_arguments', 'shopsim_wh/rollout/runtime.py check_turn', 'shopsimrl/runtime.py AgentRuntime.run', 'the call''s arguments are not the tool''s one non-empty string argument'),
        ('no_tool_call', 'protocol', 'protocol_no_tool_call', '', '', 'the response made no tool call'),
        ('multiple_tool_calls', 'protocol', 'protocol_multiple_tool_calls', '', '', 'several tool calls where one was required'),
        ('invalid_arguments', 'protocol', 'protocol_invalid_arguments', '', '', 'the tool-call arguments did not fit the tool schema'),
        ('unknown_tool', 'protocol', 'protocol_unknown_tool', '', '', 'a tool that was not offered')
)

SELECT code, kind, label, emitted_by, original, meaning FROM codes;
