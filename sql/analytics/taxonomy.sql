-- taxonomy: the error codes that error_labels assigns, with their scope and precedence.
-- grain: one row per code. key: code
-- scope 'episode': a fact about how the episode ended (located at its last step where known);
-- scope 'step': something that went wrong at one decision. precedence: lower wins when an episode's primary
-- failure is chosen (episode_primary_failure): outcome codes first (how it ended), process codes after (what
-- went wrong along the way). Every rule is documented in docs/taxonomy.md; the protocol-error and
-- policy-failure codes a runtime reports get their code from the protocol_codes view (protocol_codes.sql).
-- Portable SQL (VALUES with a column list).
CREATE OR REPLACE VIEW taxonomy AS
WITH codes (code, scope, category, precedence, definition) AS (
    VALUES
        ('infra_failure_reset', 'episode', 'infrastructure', 10, 'The final attempt failed while resetting the environment (status failed, stage reset).'),
        ('infra_failure_model', 'episode', 'infrastructure', 11, 'The final attempt failed calling the model server (stage model).'),
        ('infra_failure_step', 'episode', 'infrastructure', 12, 'The final attempt failed sending an action to the environment (stage step).'),
        ('infra_failure_terminate', 'episode', 'infrastructure', 13, 'The final attempt failed while terminating the episode (stage terminate).'),
        ('infra_failure_runtime', 'episode', 'infrastructure', 14, 'The final attempt failed inside the runtime (stage runtime).'),
        ('infra_failure_other', 'episode', 'infrastructure', 15, 'The final attempt failed at an unknown stage.'),
        ('generation_length', 'episode', 'termination', 20, 'The model ran out of tokens without a valid call (policy_failure generation_length / termination_reason generation_length).'),
        ('protocol_budget', 'episode', 'termination', 21, 'The runtime ended the episode after too many protocol errors (termination_reason protocol_budget).'),
        ('action_limit', 'episode', 'termination', 22, 'The action limit was reached without a purchase (termination_reason action_limit).'),
        ('policy_other', 'episode', 'termination', 23, 'A policy failure (steps.policy_failure) of a kind protocol_codes does not list (detail = the code).'),
        ('no_purchase', 'episode', 'outcome', 30, 'A completed shop episode (reward components present) that bought nothing.'),
        ('type_miss', 'episode', 'outcome', 40, 'Bought a product of the wrong type (r_type < 1).'),
        ('attribute_miss', 'episode', 'outcome', 41, 'Bought a product missing requested attributes (r_att < 1).'),
        ('option_miss', 'episode', 'outcome', 42, 'Bought without the requested options (r_option < 1; goals without options never get it).'),
        ('over_budget', 'episode', 'outcome', 43, 'Bought above the budget (r_price < 1).'),
        ('wrong_product', 'episode', 'outcome', 44, 'Bought another product than the goal''s (right_product = false).'),
        ('subagent_failure', 'step', 'coding', 50, 'A delegate call whose sub-agent result is an error or missing.'),
        ('tool_error', 'step', 'coding', 51, 'A tool result reported an error (observation_type tool_result, is_error).'),
        ('edit_without_read', 'step', 'coding', 52, 'An edit of a file the same agent had not read in an earlier turn.'),
        ('repeated_identical_call', 'step', 'coding', 53, 'A tool call identical (tool and arguments) to an earlier call of the same agent.'),
        ('repeated_action_loop', 'step', 'process', 60, 'The same canonical action three or more times in a row (labelled at the third).'),
        ('search_churn', 'step', 'process', 61, 'A third search since the agent last stood on an item page (labelled at that search).'),
        ('protocol_no_tool_call', 'step', 'protocol', 70, 'The response made no tool call (generic code no_tool_call of other traces).'),
        ('protocol_multiple_tool_calls', 'step', 'protocol', 71, 'The response made several tool calls where one was required (generic code multiple_tool_calls).'),
        ('protocol_invalid_arguments', 'step', 'protocol', 72, 'The tool-call arguments did not fit the tool: not a JSON string, not JSON, not an object, or not the tool''s one non-empty argument (invalid_arguments_type / _json / _object, invalid_tool_arguments, invalid_arguments).'),
        ('protocol_unknown_tool', 'step', 'protocol', 73, 'The response called a tool the page does not offer (unavailable_tool, unknown_tool).'),
        ('protocol_tool_call_count', 'step', 'protocol', 74, 'Not exactly one tool call: none or several (tool_call_count).'),
        ('protocol_mixed_content', 'step', 'protocol', 75, 'Visible text beside the tool call (mixed_content).'),
        ('protocol_malformed_tool_call', 'step', 'protocol', 76, 'A tool call without the shape of one: tool_calls not a list, not a function call, no function, no id or no name (invalid_tool_calls, invalid_tool_call, missing_function, missing_tool_call_id, missing_tool_name).'),
        ('protocol_malformed_response', 'step', 'protocol', 77, 'The answer is not a chat completion: not JSON, not an object, no choices, no message (invalid_json_response, invalid_response_body, missing_choices, invalid_choice, invalid_message).'),
        ('protocol_empty_response', 'step', 'protocol', 78, 'Neither text nor a tool call (empty_response).'),
        ('protocol_other', 'step', 'protocol', 79, 'A protocol error code that protocol_codes does not list (detail = the code).'),
        ('invalid_action', 'step', 'environment', 80, 'The environment rejected the action (action_valid false); detail = the server''s feedback code.'),
        ('task_unsolved', 'episode', 'outcome', 90, 'A completed episode scored by a task reward alone (no ShopSimulator components: tau-bench, coding traces) below 1; the catch-all, primary only when no other label fired.')
),

final AS (
    SELECT code, scope, category, CAST(precedence AS INTEGER) AS precedence, definition
    FROM codes
)

SELECT * FROM final;
