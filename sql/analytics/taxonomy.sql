-- taxonomy: the error codes that error_labels assigns, with their scope and precedence.
-- grain: one row per code. key: code
-- scope 'episode': a fact about how the episode ended (located at its last step where known);
-- scope 'step': something that went wrong at one decision. precedence: lower wins when an episode's primary
-- failure is chosen (episode_primary_failure): outcome codes first (how it ended), process codes after (what
-- went wrong along the way). Every rule is documented in docs/taxonomy.md.
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
        ('protocol_no_tool_call', 'step', 'protocol', 70, 'The response made no tool call.'),
        ('protocol_multiple_tool_calls', 'step', 'protocol', 71, 'The response made several tool calls where one was required.'),
        ('protocol_invalid_arguments', 'step', 'protocol', 72, 'The tool-call arguments did not fit the tool schema.'),
        ('protocol_unknown_tool', 'step', 'protocol', 73, 'The response called a tool that was not offered.'),
        ('protocol_other', 'step', 'protocol', 74, 'Any other protocol error kind the runtime reported.'),
        ('invalid_action', 'step', 'environment', 80, 'The environment rejected the action (action_valid false); detail = the server''s feedback code.'),
        ('task_unsolved', 'episode', 'outcome', 90, 'A completed episode scored by a task reward alone (no ShopSimulator components: tau-bench, coding traces) below 1; the catch-all, primary only when no other label fired.')
),

final AS (
    SELECT code, scope, category, CAST(precedence AS INTEGER) AS precedence, definition
    FROM codes
)

SELECT * FROM final;
