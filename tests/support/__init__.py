"""Test support for ccotel: real components used by the tests.

- :mod:`tests.support.phoenix` -- a real Phoenix trace backend on loopback
  (``PhoenixServer``), installed into its own venv by
  ``python -m tests.support.install_phoenix``.
- :mod:`tests.support.ccusage` -- ccusage as an independent reading of the
  same transcripts, installed by ``python -m tests.support.install_ccusage``;
  ``realdata_tree`` lays out ``shared/realdata`` as a Claude config dir.

Every module here uses the standard library only (the Phoenix test itself
needs the OpenTelemetry SDK and exporters from ccotel's own venv).
"""
