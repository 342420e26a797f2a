"""The other sources: Claude Code's stream-json, an orchestrator's agent registry and logs, the Agent SDK."""
