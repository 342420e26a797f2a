"""Span attribute and event names: every key ccotel writes on a span, or reads back from one, in one place.

Each name is a constant spelled as its key (capitals, dots as underscores) followed by a string that
says what it holds. docs/spans.md is generated from this module (docs/generate.py) and a test keeps the
two equal, so a key added here is documented, and a key written anywhere else is a bug.

The conventions: the OpenTelemetry GenAI semantic conventions (open-telemetry/semantic-conventions-genai,
``docs/gen-ai/gen-ai-spans.md`` @ 9430220e and ``gen-ai-agent-spans.md`` @ e8fc5751, 2026-11) for what
they name; ``claude_code.*`` for what Claude Code's transcript says that they do not; ``ccotel.*`` for what
only the stream-json relay sees.
"""

from __future__ import annotations

from typing import Final

# -- on every span -------------------------------------------------------------------------------------

GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
"""string, every span: the Claude Code session id the span belongs to."""
SESSION_ID: Final = "session.id"
"""string, every span: the session id again, under the name Phoenix, Langfuse and Claude Code's own telemetry
group sessions by."""
CLAUDE_CODE_VERSION: Final = "claude_code.version"
"""string, every span (when the transcript says): the Claude Code version that wrote the lines."""
CLAUDE_CODE_CWD: Final = "claude_code.cwd"
"""string, every span (when the transcript says): the working directory of the session."""
CLAUDE_CODE_GIT_BRANCH: Final = "claude_code.git_branch"
"""string, every span (when the transcript says): the git branch of the working directory."""
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
"""string, every span: ``invoke_agent`` (a turn or a subagent), ``chat`` (an API call) or ``execute_tool``."""

# -- invoke_agent: a turn (the root span of each trace) and a subagent run -------------------------------

GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
"""string, invoke_agent: ``claude-code`` for a turn, the subagent's type for a subagent."""
GEN_AI_AGENT_DESCRIPTION: Final = "gen_ai.agent.description"
"""string, invoke_agent (subagent): the description its spawning tool call gave."""
GEN_AI_AGENT_ID: Final = "gen_ai.agent.id"
"""string: not written on in-process agents (they carry ``claude_code.agent_id``); an id the OTLP encoder
keeps as text."""
CLAUDE_CODE_TURN_TRIGGER: Final = "claude_code.turn.trigger"
"""string, turn: what started the turn (``user``, ``command``, ``notification``, ...)."""
CLAUDE_CODE_TURN_OUTCOME: Final = "claude_code.turn.outcome"
"""string, turn: how it ended (``completed``, ``interrupted``, ``orphaned``, ``killed``, ``incomplete``, ...);
the span's status is ERROR for orphaned, interrupted and killed turns."""
CLAUDE_CODE_TURN_API_CALLS: Final = "claude_code.turn.api_calls"
"""int, invoke_agent: API calls made in the turn or subagent run."""
CLAUDE_CODE_TURN_TOOL_CALLS: Final = "claude_code.turn.tool_calls"
"""int, invoke_agent: tool calls made in the turn or subagent run."""
CLAUDE_CODE_TURN_API_ERRORS: Final = "claude_code.turn.api_errors"
"""int, turn (when any): API calls that ended in an error."""
CLAUDE_CODE_TURN_API_RETRIES: Final = "claude_code.turn.api_retries"
"""int, turn (when any): API retries Claude Code logged."""
CLAUDE_CODE_TURN_STALLED: Final = "claude_code.turn.stalled"
"""bool, turn (when true): a tool call went without a result past the stall timeout."""
CLAUDE_CODE_TURN_ORPHANED_TOOLS: Final = "claude_code.turn.orphaned_tools"
"""int, turn (when any): tool calls that never got a result."""
CLAUDE_CODE_TURN_LOST_TOOLS: Final = "claude_code.turn.lost_tools"
"""int, turn (when any): tool calls the session resumed without (a reset)."""
CLAUDE_CODE_UUID: Final = "claude_code.uuid"
"""string, turn and chat: the transcript line's uuid (the prompt's for a turn, the first line's for a call)."""
CLAUDE_CODE_PARENT_UUID: Final = "claude_code.parent_uuid"
"""string, chat: the parentUuid of the call's first line."""
CLAUDE_CODE_ENTRYPOINT: Final = "claude_code.entrypoint"
"""string, turn (when the transcript says): how Claude Code was started (``cli``, ``sdk-py``, ...)."""
CLAUDE_CODE_AGENT_ID: Final = "claude_code.agent_id"
"""string, subagent and its chat spans: the subagent's agent id."""
CLAUDE_CODE_AGENT_LINK: Final = "claude_code.agent.link"
"""string, subagent: how it was tied to its spawning tool call (``none`` when it was not)."""
CLAUDE_CODE_AGENT_BACKGROUND: Final = "claude_code.agent.background"
"""bool, subagent: it ran in the background."""
CLAUDE_CODE_AGENT_SPAWN_DEPTH: Final = "claude_code.agent.spawn_depth"
"""int, subagent (2.1.x meta.json): how deep in the spawn chain it is."""
CLAUDE_CODE_IS_SIDECHAIN: Final = "claude_code.is_sidechain"
"""bool, subagent and chat: the line belongs to a subagent's side chain."""
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
"""string (JSON), turn: the prompt, only with ``--capture-content`` (truncated, redacted)."""

# -- chat: one API call ------------------------------------------------------------------------------------

GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
"""string, chat: ``anthropic``."""
GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
"""string, chat: the message id."""
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
"""string, chat: the model asked for (``requestedModel`` differs after a fallback)."""
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
"""string, chat: the model that answered."""
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: Final = "gen_ai.response.time_to_first_chunk"
"""double (s), chat (2.1.3xx api-request lines): from the request to the first line of the answer."""
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
"""string[], chat: the stop reason."""
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
"""int, chat: all input tokens (uncached, cache read and cache write)."""
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
"""int, chat: output tokens of the final usage snapshot."""
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
"""int, chat: input tokens read from the prompt cache."""
GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS: Final = "gen_ai.usage.cache_write.input_tokens"
"""int, chat: input tokens written to the prompt cache."""
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
"""int, chat: the same as cache_write, under its older name, unless ``OTEL_SEMCONV_STABILITY_OPT_IN``
has ``gen_ai_latest_experimental``."""
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: Final = "gen_ai.usage.reasoning.output_tokens"
"""int, chat (when any): thinking tokens."""
CLAUDE_CODE_USAGE_INPUT_TOKENS: Final = "claude_code.usage.input_tokens"
"""int, chat: uncached input tokens, as Anthropic's usage counts them."""
CLAUDE_CODE_USAGE_CACHE_CREATION_EPHEMERAL_5M_INPUT_TOKENS: Final = (
    "claude_code.usage.cache_creation.ephemeral_5m_input_tokens")
"""int, chat (when the usage splits them): cache writes with a 5-minute lifetime."""
CLAUDE_CODE_USAGE_CACHE_CREATION_EPHEMERAL_1H_INPUT_TOKENS: Final = (
    "claude_code.usage.cache_creation.ephemeral_1h_input_tokens")
"""int, chat (when the usage splits them): cache writes with a 1-hour lifetime."""
CLAUDE_CODE_COST_USD: Final = "claude_code.cost.usd"
"""double, chat: the estimated cost at list prices."""
CLAUDE_CODE_COST_UNPRICED: Final = "claude_code.cost.unpriced"
"""bool, chat (when true): no price is known for the model; never a silent $0."""
CLAUDE_CODE_REQUEST_ID: Final = "claude_code.request_id"
"""string, chat: the API request id."""
CLAUDE_CODE_REQUESTED_MODEL: Final = "claude_code.requested_model"
"""string, chat (after a fallback): the model asked for, when another one answered."""
CLAUDE_CODE_EFFORT: Final = "claude_code.effort"
"""string, chat (when the transcript says): the reasoning effort asked for."""
CLAUDE_CODE_MESSAGE_LINES: Final = "claude_code.message.lines"
"""int, chat: transcript lines the response was written in (one per content block)."""
CLAUDE_CODE_ADVISOR_CALLS: Final = "claude_code.advisor_calls"
"""int, chat (when any): advisor models consulted during the response."""
CLAUDE_CODE_ADVISOR: Final = "claude_code.advisor"
"""bool, chat: the span is an advisor model's call, under the response that consulted it."""

# -- execute_tool: one tool call ---------------------------------------------------------------------------

GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
"""string, execute_tool: the tool's name."""
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
"""string, execute_tool and subagent: the tool_use id."""
GEN_AI_TOOL_TYPE: Final = "gen_ai.tool.type"
"""string, execute_tool: ``function``."""
GEN_AI_TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
"""string (JSON), execute_tool: the tool's input, only with ``--capture-content``."""
GEN_AI_TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
"""string, execute_tool: the tool's result, only with ``--capture-content``."""
CLAUDE_CODE_TOOL_AGENT_ID: Final = "claude_code.tool.agent_id"
"""string, execute_tool (Task/Agent): the agent id of the subagent it started."""
CLAUDE_CODE_TOOL_BACKGROUND: Final = "claude_code.tool.background"
"""bool, execute_tool (when true): it started a background task."""
CLAUDE_CODE_TOOL_REPAIRED: Final = "claude_code.tool.repaired"
"""bool, execute_tool (when true): its process died and the resume wrote the result."""

# -- the agent registry (``--registry``): one span per agent an orchestrator started --------------------------

CLAUDE_CODE_REGISTRY_AGENT_ID: Final = "claude_code.registry.agent_id"
"""string: the agent's id in the registry."""
CLAUDE_CODE_REGISTRY_OUTCOME: Final = "claude_code.registry.outcome"
"""string: how the agent ended (its process exited, was killed, ...)."""
CLAUDE_CODE_REGISTRY_DIR: Final = "claude_code.registry.dir"
"""string: the registry directory."""
CLAUDE_CODE_REGISTRY_DEPTH: Final = "claude_code.registry.depth"
"""int: the agent's depth in the registry's tree."""
CLAUDE_CODE_REGISTRY_PARENT_ID: Final = "claude_code.registry.parent_id"
"""string: the agent that started it."""
CLAUDE_CODE_REGISTRY_PID: Final = "claude_code.registry.pid"
"""int: its process id."""
CLAUDE_CODE_REGISTRY_SESSION_LINK: Final = "claude_code.registry.session_link"
"""string: how its Claude Code session was found (``none`` when it was not)."""
CLAUDE_CODE_REGISTRY_SESSION_TRACE_ID: Final = "claude_code.registry.session_trace_id"
"""string (hex): the trace of the agent's first turn in that session."""
CLAUDE_CODE_REGISTRY_SESSION_SPAN_ID: Final = "claude_code.registry.session_span_id"
"""string (hex): the span of the agent's first turn in that session."""

# -- read back from spans (the ledger) ------------------------------------------------------------------------

CLAUDE_CODE_PROJECT_DIR: Final = "claude_code.project_dir"
"""string: the project directory name under ``projects/``; the ledger takes it when a span has it, else the
cwd's."""

# -- the stream-json relay (``ccotel relay``) ------------------------------------------------------------------

CCOTEL_SOURCE: Final = "ccotel.source"
"""string, relay spans: ``stream`` (read from stream-json, not from the transcript)."""
CCOTEL_RELAY_LINKED: Final = "ccotel.relay.linked"
"""bool, relay turn: its prompt was found in the transcript, so its ids are the transcript path's."""
CCOTEL_RELAY_OUTPUT_TOKENS_FINAL: Final = "ccotel.relay.output_tokens_final"
"""bool, relay chat (when false): the stream ended before the call's final usage."""
CCOTEL_AGENT_STATUS: Final = "ccotel.agent.status"
"""string, relay subagent: the status the stream last gave it."""
CCOTEL_TURN_API_RETRIES: Final = "ccotel.turn.api_retries"
"""int, relay turn (when any): API retries the stream announced."""
CCOTEL_RESULT_COUNT: Final = "ccotel.result.count"
"""int, relay turn (when more than one): result messages the turn ended with."""
CCOTEL_RESULT_PREFIX: Final = "ccotel.result."
"""prefix, relay turn: the stream's result message, one attribute per figure (``ccotel.result.<name>``,
``ccotel.result.usage.<key>``, ``ccotel.result.model_usage.<figure>``)."""
CCOTEL_RESULT_USAGE_PREFIX: Final = "ccotel.result.usage."
"""prefix, relay turn: the result message's usage, one attribute per key."""
CCOTEL_RESULT_MODEL_USAGE_PREFIX: Final = "ccotel.result.model_usage."
"""prefix, relay turn: the result message's per-model usage, one array attribute per figure, in the order of
``ccotel.result.model_usage.models``."""
CCOTEL_RESULT_MODEL_USAGE_MODELS: Final = "ccotel.result.model_usage.models"
"""string[], relay turn: the models of the result message's per-model usage."""
CCOTEL_RESULT_MODEL_USAGE_COST_USD: Final = "ccotel.result.model_usage.cost_usd"
"""double[], relay turn: each model's cost as Claude Code gave it."""
CCOTEL_RESULT_PERMISSION_DENIALS: Final = "ccotel.result.permission_denials"
"""int, relay turn (when any): tool calls the user's permissions refused."""
CCOTEL_RESULT_PERMISSION_DENIALS_TOOLS: Final = "ccotel.result.permission_denials.tools"
"""string[], relay turn: the refused tools' names (not their inputs: they may hold secrets)."""

# -- events -----------------------------------------------------------------------------------------------------

CLAUDE_CODE_COMPACTION: Final = "claude_code.compaction"
"""event, turn: the conversation was compacted."""
CLAUDE_CODE_COMPACTION_TRIGGER: Final = "claude_code.compaction.trigger"
"""string, compaction event: ``manual`` or ``auto``."""
CLAUDE_CODE_COMPACTION_PRE_TOKENS: Final = "claude_code.compaction.pre_tokens"
"""int, compaction event: tokens in the context before it."""
CCOTEL_API_RETRY: Final = "ccotel.api_retry"
"""event, relay turn: an API retry the stream announced."""
CCOTEL_API_RETRY_PREFIX: Final = "ccotel.api_retry."
"""prefix, api_retry event: one attribute per figure of the retry (``ccotel.api_retry.<key>``)."""
CCOTEL_API_RETRY_ERROR: Final = "ccotel.api_retry.error"
"""string, api_retry event: the error the retry followed."""
