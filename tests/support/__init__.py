"""Test support for ccotel: real components used by the tests.

- :mod:`tests.support.phoenix` -- a real Phoenix trace backend on loopback
  (``PhoenixServer``: ``otlp_http_endpoint``, ``otlp_grpc_endpoint``,
  ``spans()``, ``wait_for_spans()``); installed into its own venv
  ``.venv-phoenix`` by ``python -m tests.support.install_phoenix``.  Its
  docstring lists what Phoenix keeps, changes and drops.
- :mod:`tests.support.ccusage` -- ccusage as an independent reading of the same
  transcripts (``run_ccusage_sessions``, ``run_ccusage_daily``), installed into
  ``tests/.node/ccusage`` by ``python -m tests.support.install_ccusage``;
  ``realdata_tree`` lays out ``shared/realdata`` as a Claude config dir.
- :mod:`tests.support.usage_check` -- the docs/format.md section 10 token arithmetic
  and a re-implementation of ccusage's rules; ``CCUSAGE_NOTES.md`` holds the
  per-session numbers and the differences.
- :mod:`tests.support.server` -- the loopback server lifecycle Phoenix and
  Prometheus share (start with port retries, bounded SIGTERM then SIGKILL).
- :mod:`tests.support.fixtures` -- pytest fixtures ``phoenix``,
  ``ccusage_installed``, ``realdata_config_dir`` (skip locally when a component
  is missing, fail under ``CI`` / ``CCOTEL_REQUIRE_REAL_COMPONENTS``).
- :mod:`tests.support.otlp` -- the one OTLP receiver of the tests and the
  benchmarks (``OtlpReceiver``: traces or metrics, HTTP or gRPC, answers
  scripted by the test, decoding or only counting); ``python -m
  tests.support.otlp`` runs it as its own process for bench/run.py.

Modules other than ``fixtures`` and ``otlp`` (opentelemetry-proto, grpc,
orjson: ccotel's own test dependencies) use the standard library only.  Imports are
``tests.support.*``: run pytest from the repo root as ``python -m pytest`` (or
add ``pythonpath = ["."]`` to the pytest config); the ``test_support_*`` files
also add the repo root to ``sys.path`` themselves.
"""
