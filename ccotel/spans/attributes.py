"""Span attribute and event names: every key ccotel writes on a span, or reads back from one, in one place.

Each name is a constant spelled as its key (capitals, dots as underscores), followed by a string that says
where it is written and what it holds; a section comment names the spans of the names below it. The
attribute tables of docs/spans.md are generated from this module (docs/generate.py) and a test keeps the
two equal, so a key added here is documented, and a key written anywhere else is a bug.

The conventions: the OpenTelemetry GenAI semantic conventions (open-telemetry/semantic-conventions-genai,
``docs/gen-ai/gen-ai-spans.md`` @ 9430220e and ``gen-ai-agent-spans.md`` @ e8fc5751, 2026-11) for what
they name; ``claude_code.*`` for what Claude Code's transcript says that they do not; ``ccotel.*`` for what
only the stream-json relay sees.
"""

from __future__ import annotations

from typing import Final

# -- every span ----------------------------------------------------------------------------------------------

GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
"""the session id (a subagent's spans carry their parent session's)."""
SESSION_ID: Final = "session.id"
"""the session id again: Phoenix, Langfuse and Claude Code's own telemetry group sessions by it."""
CLAUDE_CODE_VERSION: Final = "claude_code.version"
"""the Claude Code version that wrote the line."""
CLAUDE_CODE_CWD: Final = "claude_code.cwd"
"""where the session ran (not on tool spans)."""
CLAUDE_CODE_GIT_BRANCH: Final = "claude_code.git_branch"
"""the git branch it ran on (not on tool spans)."""
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
"""`invoke_agent`, `chat` or `execute_tool`."""

ERROR_TYPE: Final = "error.type"
"""on an ERROR span: chat: the HTTP status or error type; tool: `tool_error`, `rejected`, `interrupted`,
`orphaned`; relay and registry spans: what failed."""

# -- turns and subagents: `invoke_agent` (a turn is the root span of its trace) ------------------------------

GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
"""`claude-code` on a turn; the agent type on a subagent (`subagent` when unknown) or a registry agent."""
GEN_AI_AGENT_DESCRIPTION: Final = "gen_ai.agent.description"
"""subagent: the description from its meta.json; registry agent: its task."""
GEN_AI_AGENT_ID: Final = "gen_ai.agent.id"
"""not written: in-process agents carry `claude_code.agent_id` (named so that the OTLP encoder keeps it as text
if a span carries it)."""
CLAUDE_CODE_TURN_TRIGGER: Final = "claude_code.turn.trigger"
"""turn: `prompt`, `command`, `notification` or `continuation`."""
CLAUDE_CODE_TURN_OUTCOME: Final = "claude_code.turn.outcome"
"""turn: `completed`, `interrupted`, `orphaned`, `killed`, `incomplete` (status ERROR for the middle three)."""
CLAUDE_CODE_TURN_API_CALLS: Final = "claude_code.turn.api_calls"
"""turn and subagent: API calls in it."""
CLAUDE_CODE_TURN_TOOL_CALLS: Final = "claude_code.turn.tool_calls"
"""turn and subagent: tool calls in it."""
CLAUDE_CODE_TURN_API_ERRORS: Final = "claude_code.turn.api_errors"
"""turn, when there were some: failed API calls."""
CLAUDE_CODE_TURN_API_RETRIES: Final = "claude_code.turn.api_retries"
"""turn, when there were some: API retries."""
CLAUDE_CODE_TURN_STALLED: Final = "claude_code.turn.stalled"
"""turn: true when it went silent past `--stall-timeout` while a reply was owed."""
CLAUDE_CODE_TURN_ORPHANED_TOOLS: Final = "claude_code.turn.orphaned_tools"
"""turn: tool calls that never got a result."""
CLAUDE_CODE_TURN_LOST_TOOLS: Final = "claude_code.turn.lost_tools"
"""turn: tool calls the session resumed on a branch without (a session reset)."""
CLAUDE_CODE_UUID: Final = "claude_code.uuid"
"""turn: the prompt line's uuid; chat: the first line of the response."""
CLAUDE_CODE_PARENT_UUID: Final = "claude_code.parent_uuid"
"""chat: the parent of the response's first line."""
CLAUDE_CODE_ENTRYPOINT: Final = "claude_code.entrypoint"
"""turn: `cli`, `sdk-cli`, ... as the transcript says."""
CLAUDE_CODE_AGENT_ID: Final = "claude_code.agent_id"
"""subagent: its agent id; chat: the subagent that made the call."""
CLAUDE_CODE_AGENT_LINK: Final = "claude_code.agent.link"
"""subagent: how it was tied to its tool call: `result` (`toolUseResult.agentId`), `meta` (meta.json),
`progress` (`agent_progress` lines), `time` (by start time), `none`."""
CLAUDE_CODE_AGENT_BACKGROUND: Final = "claude_code.agent.background"
"""subagent: true for a background subagent."""
CLAUDE_CODE_AGENT_SPAWN_DEPTH: Final = "claude_code.agent.spawn_depth"
"""subagent: its nesting depth, from meta.json."""
CLAUDE_CODE_IS_SIDECHAIN: Final = "claude_code.is_sidechain"
"""subagent: true; chat: true in subagent files."""
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
"""turn: the prompt, only with `--capture-content` (truncated, redacted)."""
CLAUDE_CODE_PROJECT: Final = "claude_code.project"
"""turn: the project, the last part of the cwd (the whole path is `claude_code.cwd`): a backend's list and
search tell turns apart by it."""
INPUT_VALUE: Final = "input.value"
"""turn: the prompt's first words, only with `--capture-content` (redacted): OpenInference's input, the
column Phoenix's trace list shows."""
METADATA: Final = "metadata"
"""turn: `{"project": ...}` as JSON: OpenInference's metadata, Phoenix's `metadata` column and filter
(`metadata['project'] == 'ccotel'`)."""

# -- API calls: `chat` ---------------------------------------------------------------------------------------

GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
"""chat: `anthropic`."""
GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
"""chat: `message.id`."""
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
"""chat: the model asked for (`requestedModel`: it differs after a fallback)."""
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
"""chat: the model that answered."""
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: Final = "gen_ai.response.time_to_first_chunk"
"""chat: seconds from the request (2.1.3xx `api-request` line) to the first line."""
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
"""chat: `stop_reason`."""
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
"""chat: input + cache read + cache write (the Anthropic rule)."""
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
"""chat: output tokens, the final snapshot."""
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
"""chat: cache read."""
GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS: Final = "gen_ai.usage.cache_write.input_tokens"
"""chat: cache write."""
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
"""chat: the same, the older name; not written when `OTEL_SEMCONV_STABILITY_OPT_IN` includes
`gen_ai_latest_experimental`."""
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: Final = "gen_ai.usage.reasoning.output_tokens"
"""chat: thinking tokens, when recorded."""
CLAUDE_CODE_USAGE_INPUT_TOKENS: Final = "claude_code.usage.input_tokens"
"""chat: the raw, fresh `input_tokens`."""
CLAUDE_CODE_USAGE_CACHE_CREATION_EPHEMERAL_5M_INPUT_TOKENS: Final = (
    "claude_code.usage.cache_creation.ephemeral_5m_input_tokens")
"""chat: cache writes with a 5-minute lifetime, when recorded."""
CLAUDE_CODE_USAGE_CACHE_CREATION_EPHEMERAL_1H_INPUT_TOKENS: Final = (
    "claude_code.usage.cache_creation.ephemeral_1h_input_tokens")
"""chat: cache writes with a 1-hour lifetime, when recorded."""
CLAUDE_CODE_COST_USD: Final = "claude_code.cost.usd"
"""chat: estimated cost at list prices (`genai-prices`, or `--prices FILE`)."""
CLAUDE_CODE_COST_UNPRICED: Final = "claude_code.cost.unpriced"
"""chat: true when no price is known for the model (never a silent $0)."""
CLAUDE_CODE_REQUEST_ID: Final = "claude_code.request_id"
"""chat: `requestId`."""
CLAUDE_CODE_REQUESTED_MODEL: Final = "claude_code.requested_model"
"""chat: only when a fallback answered: the model asked for."""
CLAUDE_CODE_EFFORT: Final = "claude_code.effort"
"""chat: the effort level, when recorded."""
CLAUDE_CODE_MESSAGE_LINES: Final = "claude_code.message.lines"
"""chat: lines the response was written as (one per content block)."""
CLAUDE_CODE_ADVISOR_CALLS: Final = "claude_code.advisor_calls"
"""chat: advisor calls made during the response."""
CLAUDE_CODE_ADVISOR: Final = "claude_code.advisor"
"""chat: true on an advisor's own span (its model, usage and cost), under the response."""

# -- tool calls: `execute_tool` ------------------------------------------------------------------------------

GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
"""tool: the tool."""
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
"""tool: the tool_use id; subagent: the Task/Agent tool_use that spawned it."""
GEN_AI_TOOL_TYPE: Final = "gen_ai.tool.type"
"""tool: `function`."""
GEN_AI_TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
"""tool: its input, only with `--capture-content` (cut to `--max-attribute-length`, redacted)."""
GEN_AI_TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
"""tool: its result, only with `--capture-content` (cut to `--max-attribute-length`, redacted)."""
CLAUDE_CODE_TOOL_AGENT_ID: Final = "claude_code.tool.agent_id"
"""tool: the subagent a Task/Agent call started."""
CLAUDE_CODE_TOOL_BACKGROUND: Final = "claude_code.tool.background"
"""tool: true for a background subagent (`run_in_background`, async launch)."""
CLAUDE_CODE_TOOL_REPAIRED: Final = "claude_code.tool.repaired"
"""tool: true when its process died and a 2.1.3xx resume wrote the result."""

# -- registry agents (`--registry`): one span per agent an orchestrator started ------------------------------

CLAUDE_CODE_REGISTRY_AGENT_ID: Final = "claude_code.registry.agent_id"
"""the agent's id in the registry."""
CLAUDE_CODE_REGISTRY_OUTCOME: Final = "claude_code.registry.outcome"
"""`done`, `failed`, `killed` (the last two set `error.type`)."""
CLAUDE_CODE_REGISTRY_DIR: Final = "claude_code.registry.dir"
"""the registry directory."""
CLAUDE_CODE_REGISTRY_DEPTH: Final = "claude_code.registry.depth"
"""its depth in the registry."""
CLAUDE_CODE_REGISTRY_PARENT_ID: Final = "claude_code.registry.parent_id"
"""the agent that started it."""
CLAUDE_CODE_REGISTRY_PID: Final = "claude_code.registry.pid"
"""its process id."""
CLAUDE_CODE_REGISTRY_SESSION_LINK: Final = "claude_code.registry.session_link"
"""how its Claude Code session was found, or `none`."""
CLAUDE_CODE_REGISTRY_SESSION_TRACE_ID: Final = "claude_code.registry.session_trace_id"
"""the trace of the agent's first turn in that session."""
CLAUDE_CODE_REGISTRY_SESSION_SPAN_ID: Final = "claude_code.registry.session_span_id"
"""the span of the agent's first turn in that session."""

# -- read back from spans by the ledger ----------------------------------------------------------------------

CLAUDE_CODE_PROJECT_DIR: Final = "claude_code.project_dir"
"""read by the ledger: the project directory under `projects/` when a span has it, else the cwd's."""

# -- the stream-json relay (`ccotel relay`) ------------------------------------------------------------------

CCOTEL_SOURCE: Final = "ccotel.source"
"""every relay span: `stream`."""
CCOTEL_RELAY_LINKED: Final = "ccotel.relay.linked"
"""turn: false when no transcript named the prompt (the ids are the relay's own)."""
CCOTEL_RELAY_OUTPUT_TOKENS_FINAL: Final = "ccotel.relay.output_tokens_final"
"""chat: false when the stream's output count is a placeholder."""
CCOTEL_AGENT_STATUS: Final = "ccotel.agent.status"
"""subagent: the task's status on the stream."""
CCOTEL_TURN_API_RETRIES: Final = "ccotel.turn.api_retries"
"""turn: `system/api_retry` records."""
CCOTEL_RESULT_COUNT: Final = "ccotel.result.count"
"""turn: `result` records the turn ended with."""
CCOTEL_RESULT_PREFIX: Final = "ccotel.result."
"""turn: the `result` records: `subtype`, `is_error`, `num_turns`, `duration_ms`, `duration_api_ms`,
`total_cost_usd`, `terminal_reason`, `stop_reason`, `api_error_status`."""
CCOTEL_RESULT_USAGE_PREFIX: Final = "ccotel.result.usage."
"""turn: the `result` record's usage, one attribute per key."""
CCOTEL_RESULT_MODEL_USAGE_PREFIX: Final = "ccotel.result.model_usage."
"""turn: the `result` record's usage per model, one array per figure, in the order of the models."""
CCOTEL_RESULT_MODEL_USAGE_MODELS: Final = "ccotel.result.model_usage.models"
"""turn: the models of the usage per model."""
CCOTEL_RESULT_MODEL_USAGE_COST_USD: Final = "ccotel.result.model_usage.cost_usd"
"""turn: each model's cost, as Claude Code gave it."""
CCOTEL_RESULT_PERMISSION_DENIALS: Final = "ccotel.result.permission_denials"
"""turn: tool calls the permissions refused (a count)."""
CCOTEL_RESULT_PERMISSION_DENIALS_TOOLS: Final = "ccotel.result.permission_denials.tools"
"""turn: the refused tools' names (not their inputs: they may hold secrets)."""

# -- events --------------------------------------------------------------------------------------------------

CLAUDE_CODE_COMPACTION: Final = "claude_code.compaction"
"""event on a turn: the conversation was compacted."""
CLAUDE_CODE_COMPACTION_TRIGGER: Final = "claude_code.compaction.trigger"
"""`auto` or `manual`."""
CLAUDE_CODE_COMPACTION_PRE_TOKENS: Final = "claude_code.compaction.pre_tokens"
"""tokens in the context before it."""
CCOTEL_API_RETRY: Final = "ccotel.api_retry"
"""event on a relay turn: a `system/api_retry` record."""
CCOTEL_API_RETRY_PREFIX: Final = "ccotel.api_retry."
"""`attempt`, `max_retries`, `retry_delay_ms`, `error_status`."""
CCOTEL_API_RETRY_ERROR: Final = "ccotel.api_retry.error"
"""the error the retry followed."""
