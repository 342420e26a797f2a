"""The stream-json source: what ``claude -p --output-format stream-json --verbose`` prints -> SpanRecords.

Pure but for ``prompts``: no I/O and no clocks (callers pass each line's arrival time);
commands/relay.py reads the stream, passes it on and exports what this package builds. Its modules, in the order a line
goes through them: ``lines`` (a line -> a record; the new blocks of cumulative content arrays),
``assembler`` (records -> the turns, calls, tool calls and subagents of ``state``, with the
transcript path's ids), ``spans`` (those -> SpanRecords, by the transcript path's span builder,
ccotel/spans/build.py) and ``results`` (what only the stream has: its ``result`` and
``api_retry`` records, as attributes); ``prompts`` finds a turn's prompt in the session's
transcript, the one I/O here.

What the stream carries (Claude Code 2.1.197, 2.1.330 and 2.1.332, tests/fixtures/**/runs/*/stdout.jsonl):
``system/init`` (session_id, cwd, model, claude_code_version), one ``assistant`` record per content
block with the transcript line's ``uuid``, ``message.id`` and ``request_id`` (usage is the
``message_start`` snapshot: ``output_tokens`` 1, ``stop_reason`` null), ``user`` records (tool
results, subagent prompts) with the transcript line's ``uuid``, ``parent_tool_use_id`` on every
record of a subagent (the Agent/Task tool_use that spawned it), ``system/task_started`` (``task_id``
= the agentId, ``tool_use_id``, ``subagent_type``), ``task_notification`` (the agent finished),
``system/api_retry`` and one ``result`` per turn (two when a background agent's notification
starts another round). It does not carry the prompt's uuid, which the transcript path derives a
turn's trace id from: ``resolve_prompt`` (``prompts.TranscriptPrompts``, reading the transcript) supplies it.

Ids (ccotel/assemble/ids.py, as spans/build.py and assemble/ derive them): turn
``span_id("turn", session, prompt uuid)`` in trace ``trace_id(session, prompt uuid)``; chat
``span_id("chat", call_key(message.id, request_id))``; tool ``span_id("tool", session,
tool_use_id)``; subagent ``span_id("agent", session, agentId)``. A turn whose prompt cannot be
found gets ids of its own (``ccotel.relay.linked = false``): the transcript path has no copy then.
"""
