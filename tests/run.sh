#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what the tests need, then runs pytest.
#   - ccotel and its test dependencies in .venv
#   - the pinned Claude Code CLI and ccusage from npm under tests/.node (real-CLI e2e tests, token cross-check)
#   - Phoenix in its own venv .venv-phoenix (a real OTLP trace backend)
#   - lint and type checks first: ruff over ccotel, tests and bench; mypy --strict over ccotel; the import
#     contract (lint-imports: layers and no cycles, pyproject.toml)
# Extra arguments go to pytest (e.g. tests/run.sh -m e2e).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# compat: a plain path in a .pth, as an installed package is found; the default editable finder
# hook costs every Python start ~25-50 ms of imports (pathlib, re, urllib), which the benchmarks'
# short runs (a report from the ledger, worker processes) would measure and no user pays.
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]' --config-settings editable_mode=compat
# the live e2e tests drive the oldest and the newest Claude Code version of the matrix (~1 min each;
# the versions between are checked on their committed fixtures): CCOTEL_CLAUDE_VERSIONS=all for every one
export CCOTEL_CLAUDE_VERSIONS=${CCOTEL_CLAUDE_VERSIONS:-ends}
.venv/bin/python -m tests.harness.install --selected
.venv/bin/python -m tests.support.install_ccusage
.venv/bin/python -m tests.support.install_phoenix
.venv/bin/python -m tests.support.install_prometheus
.venv/bin/python -m tests.support.install_deploy_tools
.venv/bin/python -m tests.support.install_postgres
.venv/bin/python -m ruff check ccotel tests bench docs
.venv/bin/python -m mypy ccotel
.venv/bin/lint-imports
# one pytest worker per core: most of the suite's time is spent waiting on real CLIs, servers and signals
exec .venv/bin/python -m pytest -n auto "$@"
