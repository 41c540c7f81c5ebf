"""The agent protocol's error vocabulary: every protocol-error and policy-failure code, declared once.

The model client (:func:`model.parse_response`, :meth:`model.ChatModel.generate`) and the runtime
(:func:`runtime.check_turn`) emit the constants below and nothing else; ShopSimRL's own runtime writes the same
codes (``CODES[i].original`` says where), and traces of other tools use the generic names of ``GENERIC``.

``CODES`` gives each code its error-taxonomy label (docs/taxonomy.md). The SQL taxonomy reads it through the view
``protocol_codes`` of ``sql/analytics/protocol_codes.sql``, which :func:`protocol_codes_sql` writes
(``python -m shopsim_wh.core.protocol_codes``); a test fails when that file is stale, when a label is not a
``taxonomy`` code, or when a code the runtime or the model client emits (found by scanning their source) has
no entry here.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

# -- the model client's checks of a 200 answer, in the order they run (the first failing one names the error)
INVALID_JSON_RESPONSE = "invalid_json_response"
INVALID_RESPONSE_BODY = "invalid_response_body"
MISSING_CHOICES = "missing_choices"
INVALID_CHOICE = "invalid_choice"
INVALID_MESSAGE = "invalid_message"
INVALID_TOOL_CALLS = "invalid_tool_calls"
INVALID_TOOL_CALL = "invalid_tool_call"
MISSING_FUNCTION = "missing_function"
MISSING_TOOL_CALL_ID = "missing_tool_call_id"
MISSING_TOOL_NAME = "missing_tool_name"
INVALID_ARGUMENTS_TYPE = "invalid_arguments_type"
INVALID_ARGUMENTS_JSON = "invalid_arguments_json"
INVALID_ARGUMENTS_OBJECT = "invalid_arguments_object"
UNAVAILABLE_TOOL = "unavailable_tool"
GENERATION_LENGTH = "generation_length"  # a policy failure: the episode is terminated with this reason
TOOL_CALL_COUNT = "tool_call_count"
MIXED_CONTENT = "mixed_content"
EMPTY_RESPONSE = "empty_response"
# -- the runtime's own check of the one accepted call
INVALID_TOOL_ARGUMENTS = "invalid_tool_arguments"

PROTOCOL, POLICY = "protocol", "policy"
_MODEL = "shopsimrl/model.py OpenAICompatibleChatModel._parse_response"
_MODEL_HTTP = "shopsimrl/model.py OpenAICompatibleChatModel.generate"
_RUNTIME = "shopsimrl/runtime.py AgentRuntime.run"
_BOTH = f"{_MODEL}; {_RUNTIME}"


@dataclass(frozen=True)
class Code:
    code: str
    kind: str  # protocol (a repaired turn) | policy (the episode is terminated)
    label: str  # the taxonomy code error_labels gives it
    emitted_by: str  # where shopsim-wh emits it ('' for the generic names of other traces)
    original: str  # where ShopSimRL's runtime writes it ('' when it never does)
    meaning: str


CODES: tuple[Code, ...] = (
    Code(INVALID_JSON_RESPONSE, PROTOCOL, "protocol_malformed_response", "shopsim_wh/rollout/model.py ChatModel.generate", _MODEL_HTTP,
         "the 200 answer's body is not JSON"),
    Code(INVALID_RESPONSE_BODY, PROTOCOL, "protocol_malformed_response", "shopsim_wh/rollout/model.py parse_response", _MODEL,
         "the answer is not a JSON object"),
    Code(MISSING_CHOICES, PROTOCOL, "protocol_malformed_response", "shopsim_wh/rollout/model.py parse_response", _MODEL,
         "the answer has no choices"),
    Code(INVALID_CHOICE, PROTOCOL, "protocol_malformed_response", "shopsim_wh/rollout/model.py parse_response", _MODEL,
         "the first choice is not an object"),
    Code(INVALID_MESSAGE, PROTOCOL, "protocol_malformed_response", "shopsim_wh/rollout/model.py parse_response", _MODEL,
         "the choice has no message object"),
    Code(INVALID_TOOL_CALLS, PROTOCOL, "protocol_malformed_tool_call", "shopsim_wh/rollout/model.py parse_response", _MODEL,
         "tool_calls is not a list"),
    Code(INVALID_TOOL_CALL, PROTOCOL, "protocol_malformed_tool_call", "shopsim_wh/rollout/model.py parse_response", _MODEL,
         "a tool call is not an object of type function"),
    Code(MISSING_FUNCTION, PROTOCOL, "protocol_malformed_tool_call", "shopsim_wh/rollout/model.py parse_response", _MODEL,
         "a tool call has no function object"),
    Code(MISSING_TOOL_CALL_ID, PROTOCOL, "protocol_malformed_tool_call", "shopsim_wh/rollout/model.py parse_response", _MODEL,
         "a tool call has no id"),
    Code(MISSING_TOOL_NAME, PROTOCOL, "protocol_malformed_tool_call", "shopsim_wh/rollout/model.py parse_response", _MODEL,
         "a tool call has no function name"),
    Code(INVALID_ARGUMENTS_TYPE, PROTOCOL, "protocol_invalid_arguments", "shopsim_wh/rollout/model.py parse_response", _MODEL,
         "a call's arguments are not a JSON string"),
    Code(INVALID_ARGUMENTS_JSON, PROTOCOL, "protocol_invalid_arguments", "shopsim_wh/rollout/model.py parse_response", _MODEL,
         "a call's arguments are not valid JSON"),
    Code(INVALID_ARGUMENTS_OBJECT, PROTOCOL, "protocol_invalid_arguments", "shopsim_wh/rollout/model.py parse_response", _MODEL,
         "a call's arguments do not decode to a JSON object"),
    Code(UNAVAILABLE_TOOL, PROTOCOL, "protocol_unknown_tool", "shopsim_wh/rollout/model.py parse_response", _MODEL,
         "a call names a tool the page does not offer"),
    Code(GENERATION_LENGTH, POLICY, "generation_length", "shopsim_wh/rollout/model.py parse_response", _MODEL,
         "finish_reason length without exactly one call: the episode is terminated"),
    Code(TOOL_CALL_COUNT, PROTOCOL, "protocol_tool_call_count", "shopsim_wh/rollout/model.py parse_response; shopsim_wh/rollout/runtime.py check_turn", _BOTH,
         "not exactly one tool call (none, or several)"),
    Code(MIXED_CONTENT, PROTOCOL, "protocol_mixed_content", "shopsim_wh/rollout/model.py parse_response; shopsim_wh/rollout/runtime.py check_turn", _BOTH,
         "visible text beside the tool call"),
    Code(EMPTY_RESPONSE, PROTOCOL, "protocol_empty_response", "shopsim_wh/rollout/model.py parse_response", _MODEL,
         "neither text nor a tool call (when no tool is required)"),
    Code(INVALID_TOOL_ARGUMENTS, PROTOCOL, "protocol_invalid_arguments", "shopsim_wh/rollout/runtime.py check_turn", _RUNTIME,
         "the call's arguments are not the tool's one non-empty string argument"),
)

# generic names other trace formats (and the synthetic cookbook data) use
GENERIC: tuple[Code, ...] = (
    Code("no_tool_call", PROTOCOL, "protocol_no_tool_call", "", "", "the response made no tool call"),
    Code("multiple_tool_calls", PROTOCOL, "protocol_multiple_tool_calls", "", "",
         "several tool calls where one was required"),
    Code("invalid_arguments", PROTOCOL, "protocol_invalid_arguments", "", "",
         "the tool-call arguments did not fit the tool schema"),
    Code("unknown_tool", PROTOCOL, "protocol_unknown_tool", "", "", "a tool that was not offered"),
)

ALL: tuple[Code, ...] = CODES + GENERIC
LABELS: dict[str, str] = {c.code: c.label for c in ALL}
PROTOCOL_OTHER, POLICY_OTHER = "protocol_other", "policy_other"  # the labels of codes no entry knows
SQL_FILE = Path(__file__).resolve().parents[2] / "sql" / "analytics" / "protocol_codes.sql"


def _q(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def protocol_codes_sql() -> str:
    """The text of sql/analytics/protocol_codes.sql: ``ALL`` as a view."""
    rows = ",\n".join(f"        ({_q(c.code)}, {_q(c.kind)}, {_q(c.label)}, {_q(c.emitted_by)}, {_q(c.original)}, "
                      f"{_q(c.meaning)})" for c in ALL)
    return (
        "-- protocol_codes: every protocol-error and policy-failure code a runtime reports, with its error label.\n"
        "-- grain: one row per code. key: code\n"
        "-- GENERATED from shopsim_wh/core/protocol_codes.py by `python -m shopsim_wh.core.protocol_codes`; do not edit.\n"
        "-- kind: protocol (steps.protocol_error, a repaired turn) or policy (steps.policy_failure, the episode is\n"
        "-- terminated); label: the taxonomy code error_labels gives it (a code not listed: protocol_other /\n"
        "-- policy_other); emitted_by: where shopsim-wh emits it (empty: a generic name of other traces);\n"
        "-- original: where ShopSimRL's runtime writes it. Portable SQL (VALUES with a column list).\n"
        "CREATE OR REPLACE VIEW protocol_codes AS\n"
        "WITH codes (code, kind, label, emitted_by, original, meaning) AS (\n"
        "    VALUES\n"
        f"{rows}\n"
        ")\n\n"
        "SELECT code, kind, label, emitted_by, original, meaning FROM codes;\n"
    )


def main() -> int:
    SQL_FILE.write_text(protocol_codes_sql())
    print(f"wrote {SQL_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
