"""Test harness that drives the real Claude Code CLI against a scripted fake Anthropic API.

Modules:
    fakeapi    -- the scripted fake Messages API server (SSE) and its ground-truth log.
    install    -- installs the pinned CLI into tests/.node (``python -m tests.harness.install``).
    runner     -- runs the CLI with a private HOME / CLAUDE_CONFIG_DIR and a hard timeout.
    scenarios  -- the scenarios (data for the fake API + the CLI runs).
    regenerate -- reruns scenarios and rewrites tests/fixtures (``python -m tests.harness.regenerate``).
    fixtures   -- loader for the committed fixtures (``load_fixture``, ``copy_fixture``).
    checks     -- plain-json checks of transcripts against ground truth (no ccotel code).
"""
