"""Assembly: a session's entries -> turns, API calls, tool calls and subagent runs (the parentUuid tree)."""
