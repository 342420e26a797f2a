"""An orchestrator's agent registry (``ccotel run --registry DIR``): the agents it started, as spans
and metrics, and the ones whose process died while they were still at work.

What the orchestrator writes (docs/format.md section 11, docs/registry.md):
- ``DIR/.active-pids.json``: ``{agentId: {pid, depth, parentId, agentType}}``, an entry written with
  ``pid: null`` before the spawn and updated after; entries are never removed.
- ``DIR/agent-responses/<agentId>.md``: YAML-like front matter (``Task``, ``Instructions``,
  ``Started``, ``Status: in-progress|done|failed``, ``Depth``, ``ParentAgent``, ``Ended``) between
  ``---`` lines, then the agent's output, appended while it runs.

Both files are rewritten in place: a read can see half a JSON document or a front matter without
its closing line. That is normal: it is counted by reason (``ccotel_registry_bad_input``), the last
good reading is kept, and the file is read again on its next change (and once more at the next
poll, for a writer that finished within the file system's timestamp granularity).

An agent is judged once it is over: ``done`` or ``failed`` from its front matter, or ``killed``
when its pid is gone, or taken by another process (the start time says so), while its Status
still says in-progress, for ``kill_grace_ns`` (the orchestrator writes the final Status just after
its child exits). Each judged agent is one ``invoke_agent {agentType}`` span, in one trace per root
agent, parented by ``parentId``, and counted once, across restarts: the state keeps a mark per
agent (``take_commit``), anchored to its ``.md`` file, so the mark goes when the file goes. Its
type (a label of those counters) comes from its entry: an agent over before its entry is written
waits for it (``ENTRY_WAIT_NS``), so it is counted under its type rather than as ``agent``.
Agents already over when ccotel first sees a registry are history: they get their spans but are
not counted (as transcripts read on a first start, pipeline.py).

The Claude Code session an agent ran is found by its process: ``<root>/sessions/<pid>.json`` of
the agent's pid or of a process below it (a wrapper), with the same process start time; or, once
the process is gone, a file left behind by a killed one (same pid, started while the agent ran).

Modules: files (reading the two files), agents (what is known of one agent), liveness (its
process, its session, its outcome), telemetry (its span and its counts), follower (the Registry
that polls a directory, and ``ccotel run``'s options for it).
"""
