"""A real Phoenix trace backend for tests, on loopback only.

Phoenix (``arize-phoenix``, pinned in :data:`PHOENIX_VERSION`) lives in its own
venv (``.venv-phoenix`` at the repo root, created by
``python -m tests.support.install_phoenix``) so that its pins never touch
ccotel's.  :class:`PhoenixServer` starts ``phoenix serve`` from that venv on
free ports with a private working dir (sqlite) and reads spans back over the
REST API.  This module uses the standard library only.

Configuration (from ``phoenix/config.py`` of 20.26.1, not guessed):

- ``PHOENIX_HOST`` / ``PHOENIX_PORT``: the HTTP server (UI, REST ``/v1``, OTLP
  over HTTP at ``/v1/traces``).  ``PHOENIX_GRPC_PORT``: OTLP over gRPC.
- ``PHOENIX_WORKING_DIR``: where ``phoenix.db`` (sqlite) is created, unless
  ``PHOENIX_SQL_DATABASE_URL`` / ``PHOENIX_POSTGRES_*`` are set (we strip them).
- ``PHOENIX_ALLOW_EXTERNAL_RESOURCES=false``: "Phoenix makes no public-internet
  requests on its own initiative, such as web fonts, telemetry, or the WASM
  sandbox binary download"; it also forces ``PHOENIX_TELEMETRY_ENABLED`` off
  (FullStory / Scarf pixels), which we set to false as well.
- ``PHOENIX_DISABLE_AGENT_ASSISTANT=true``, ``PHOENIX_ENABLE_MCP_SERVER=false``,
  ``PHOENIX_ALLOWED_SANDBOX_PROVIDERS=NONE``, ``PHOENIX_ENABLE_PROMETHEUS=false``:
  features we do not need and that could listen or call out.
- The gRPC server binds ``[::]:<port>`` unconditionally
  (``phoenix/server/grpc_server.py``: ``server.add_insecure_port(f"[::]:{port}")``),
  ignoring ``PHOENIX_HOST``.  The launcher below therefore wraps
  ``grpc.aio`` ``Server.add_insecure_port`` so that it binds ``127.0.0.1``.
  Result: HTTP listens on ``127.0.0.1:P``, gRPC on ``[::ffff:127.0.0.1]:G``.

What Phoenix keeps, changes and drops (verified by tests/support_selftest/test_support_phoenix.py):

- Project: the resource attribute ``openinference.project.name`` (not kept as
  an attribute), else ``"default"``.  A trace id belongs to ONE project:
  ``traces.trace_id`` is unique, and later spans of a known trace go to the
  trace's first project whatever their resource says.
- Ids: OTLP bytes -> lowercase hex (32 chars trace, 16 chars span), unchanged.
  ``spans.span_id`` is unique: a span re-sent with a known span id is silently
  ignored (first write wins, the export still reports success).  Re-exporting
  the same transcript is idempotent; an "updated" span is NOT updated.
- Times: ``datetime.fromtimestamp(ns / 1e9, tz=utc)`` -- microseconds, rounded
  to nearest through a float (error < 1 us).  Whole-microsecond (and so
  whole-millisecond) times round-trip exactly; use :func:`phoenix_time_ns`
  to predict the stored value of any ns time.  The REST API returns ISO 8601
  with ``+00:00``.
- OTel ``SpanKind`` (CLIENT, INTERNAL, ...) is dropped.  ``span_kind`` in the
  API is the OpenInference kind: the ``openinference.span.kind`` attribute
  (removed from ``attributes``), else inferred from ``gen_ai.operation.name``
  (chat -> LLM, execute_tool -> TOOL, invoke_agent -> AGENT), else from
  ``gen_ai.tool.*`` (TOOL) / ``gen_ai.request.model`` (LLM), else "UNKNOWN".
- Resource attributes (``service.name`` ...) and the instrumentation scope are
  not stored and not returned.
- Attributes: every sent attribute comes back under its own dotted key with
  its value and type (int, float, bool, str, "" , homogeneous lists; ints up to
  int64).  Phoenix ADDS OpenInference attributes synthesized from ``gen_ai.*``
  (``setdefault``, never overriding ours).  Verified set: on a chat span
  ``llm.model_name``, ``llm.provider``, ``llm.system``, ``llm.finish_reason``
  (first of finish_reasons), ``llm.token_count.prompt`` (= gen_ai input_tokens),
  ``.completion``, ``.total`` (prompt + completion),
  ``llm.token_count.prompt_details.cache_read`` / ``cache_write``,
  ``output.value`` = ``{"id": <response.id>, "model": <response.model>}`` with
  ``output.mime_type`` application/json; on an execute_tool span ``tool.name``
  and ``tool.id`` (from gen_ai.tool.name / gen_ai.tool.call.id); on any span
  with ``gen_ai.conversation.id`` a ``session.id`` (Phoenix groups traces into
  sessions by it); nothing on spans without ``gen_ai.*`` attributes.  Keys are
  split on "." and rebuilt: an empty segment disappears (``"a..b"`` ->
  ``"a.b"``), and keys ending in ``metadata`` / ``tool.parameters`` /
  ``llm.prompt_template.variables`` holding a JSON string are parsed and
  flattened (``metadata='{"k":1}'`` -> ``metadata.k = 1``).  ``"a.b"`` and
  ``"a.b.c"`` can coexist.
- Status: ``status_code`` "OK" / "ERROR" / "UNSET", ``status_message`` ("" when none).

REST: ``GET /v1/projects/{project}/spans?limit=1..1000&cursor=&sort=id&order=asc``
answers ``{"data": [span...], "next_cursor": str|null}``; a span is
``{"id" (Phoenix global id), "name", "context": {"trace_id", "span_id"},
"span_kind", "parent_id", "start_time", "end_time", "status_code",
"status_message", "attributes" (flat dict), "events"}``.  An unknown project
is a 404 (it is created with the first span sent to it).  Ingestion is
asynchronous (a queue and a bulk inserter): poll with :meth:`wait_for_spans`.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tests.support.server import LoopbackServer, free_port

__all__ = [
    "PHOENIX_VERSION",
    "DEFAULT_VENV",
    "PhoenixError",
    "PhoenixNotInstalled",
    "PhoenixServer",
    "free_port",
    "installed_phoenix_version",
    "phoenix_python",
    "phoenix_time_ns",
    "phoenix_venv",
]

#: The one pin of the Phoenix version the tests use.
PHOENIX_VERSION = "20.26.1"

REPO_ROOT = Path(__file__).resolve().parents[2]
#: Default location of Phoenix's own venv (gitignored by ``.venv*/``).
DEFAULT_VENV = REPO_ROOT / ".venv-phoenix"
#: Environment variable that points at another venv holding Phoenix.
VENV_ENV_VAR = "CCOTEL_PHOENIX_VENV"

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

# Run with the Phoenix venv's python as `python -c _LAUNCHER`: pin the gRPC
# listener to loopback, then run `phoenix serve` exactly as the console script.
_LAUNCHER = r"""
import sys
import grpc.aio._server as _grpc_server

def _loopback(address):
    if address.startswith("[::]:"):
        return "127.0.0.1:" + address[len("[::]:"):]
    if address.startswith("0.0.0.0:"):
        return "127.0.0.1:" + address[len("0.0.0.0:"):]
    return address

_insecure = _grpc_server.Server.add_insecure_port
_secure = _grpc_server.Server.add_secure_port
_grpc_server.Server.add_insecure_port = lambda self, a: _insecure(self, _loopback(a))
_grpc_server.Server.add_secure_port = lambda self, a, c: _secure(self, _loopback(a), c)

from phoenix.server.main import main
sys.argv = ["phoenix", "serve"]
sys.exit(main())
"""


class PhoenixError(RuntimeError):
    """Phoenix did not start, answer or stop as expected."""


class PhoenixNotInstalled(PhoenixError):
    """The Phoenix venv is missing or holds another version."""


def phoenix_venv() -> Path:
    """The venv holding Phoenix: ``$CCOTEL_PHOENIX_VENV`` or ``.venv-phoenix``."""
    override = os.environ.get(VENV_ENV_VAR)
    return Path(override) if override else DEFAULT_VENV


def phoenix_python(venv: Path | None = None) -> Path:
    return (venv or phoenix_venv()) / "bin" / "python"


def installed_phoenix_version(venv: Path | None = None) -> str | None:
    """The arize-phoenix version installed in ``venv``, or None."""
    python = phoenix_python(venv)
    if not python.exists():
        return None
    try:
        out = subprocess.run(
            [
                str(python),
                "-c",
                "import importlib.metadata as m; print(m.version('arize-phoenix'))",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def phoenix_time_ns(time_unix_nano: int) -> int:
    """The ns time Phoenix stores for an OTLP ``time_unix_nano``.

    Phoenix decodes with ``datetime.fromtimestamp(ns / 1e9, tz=utc)``
    (``phoenix/trace/otel.py`` ``_decode_unix_nano``); this repeats that.
    """
    return datetime_to_ns(datetime.fromtimestamp(time_unix_nano / 1e9, tz=timezone.utc))


def datetime_to_ns(value: datetime) -> int:
    """Exact ns since the epoch of an aware datetime (no float)."""
    delta = value - _EPOCH
    return ((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds) * 1_000


def _parse_time(value: str) -> datetime:
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:  # Phoenix always sends an offset; be safe anyway.
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed


def _span_record(raw: Mapping[str, Any], project: str) -> dict[str, Any]:
    start = _parse_time(raw["start_time"])
    end = _parse_time(raw["end_time"])
    return {
        "trace_id": raw["context"]["trace_id"],
        "span_id": raw["context"]["span_id"],
        "parent_id": raw.get("parent_id"),
        "name": raw["name"],
        "span_kind": raw.get("span_kind"),
        "start_time": start,
        "end_time": end,
        "start_time_unix_nano": datetime_to_ns(start),
        "end_time_unix_nano": datetime_to_ns(end),
        "status_code": raw.get("status_code"),
        "status_message": raw.get("status_message") or "",
        "attributes": dict(raw.get("attributes") or {}),
        "events": list(raw.get("events") or []),
        "phoenix_id": raw.get("id"),
        "project": project,
    }


_CLEAN_ENV_PREFIXES = ("PHOENIX_", "OTEL_")


class PhoenixServer(LoopbackServer):
    """``phoenix serve`` on 127.0.0.1, free ports, a private sqlite working dir.

    Use as a context manager (or call :meth:`start` / :meth:`stop`)::

        with PhoenixServer() as phoenix:
            exporter = OTLPSpanExporter(endpoint=phoenix.otlp_http_endpoint)
            ...
            spans = phoenix.wait_for_spans(3)

    Every wait is bounded: ``startup_timeout`` for readiness, ``stop_timeout``
    for a graceful SIGTERM before SIGKILL, ``timeout`` on reads.
    """

    name = "phoenix"
    error = PhoenixError
    log_lines = 60

    def __init__(
        self,
        *,
        venv: Path | None = None,
        startup_timeout: float = 120.0,
        stop_timeout: float = 20.0,
        extra_env: Mapping[str, str] | None = None,
        keep_workdir: bool = False,
        require_version: str | None = PHOENIX_VERSION,
    ) -> None:
        super().__init__(startup_timeout=startup_timeout, stop_timeout=stop_timeout, keep_dir=keep_workdir)
        self.venv = Path(venv) if venv else phoenix_venv()
        self.extra_env = dict(extra_env or {})
        self.require_version = require_version
        self.http_port = 0
        self.grpc_port = 0
        self.working_dir: Path | None = None
        self._python: Path | None = None

    # -- endpoints ---------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def otlp_http_endpoint(self) -> str:
        """Full OTLP/HTTP traces URL (give it to ``OTLPSpanExporter(endpoint=)``)."""
        return f"{self.base_url}/v1/traces"

    @property
    def otlp_grpc_endpoint(self) -> str:
        """OTLP/gRPC endpoint, plaintext (use ``insecure=True``)."""
        return f"http://{self.host}:{self.grpc_port}"

    # -- LoopbackServer ------------------------------------------------------

    def _prepare(self) -> None:
        assert self.tmpdir is not None
        self.working_dir = self.tmpdir / "phoenix"
        self.working_dir.mkdir()
        (self.tmpdir / "home").mkdir()

    def _pick_ports(self) -> None:
        self.http_port = free_port()
        self.grpc_port = free_port()
        while self.grpc_port == self.http_port:
            self.grpc_port = free_port()

    def _command(self, attempt: int) -> list[str]:
        return [str(self._python), "-c", _LAUNCHER]

    def _check(self) -> None:
        python = phoenix_python(self.venv)
        if not python.exists():
            raise PhoenixNotInstalled(
                f"no Phoenix venv at {self.venv}: run `python -m tests.support.install_phoenix`"
            )
        if self.require_version is not None:
            found = installed_phoenix_version(self.venv)
            if found != self.require_version:
                raise PhoenixNotInstalled(
                    f"{self.venv} has arize-phoenix {found!r}, want {self.require_version}: "
                    "run `python -m tests.support.install_phoenix`"
                )
        self._python = python

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(_CLEAN_ENV_PREFIXES)}
        assert self.tmpdir is not None and self.working_dir is not None
        env.update(
            {
                "HOME": str(self.tmpdir / "home"),
                "PHOENIX_HOST": self.host,
                "PHOENIX_PORT": str(self.http_port),
                "PHOENIX_GRPC_PORT": str(self.grpc_port),
                "PHOENIX_WORKING_DIR": str(self.working_dir),
                "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
                "PHOENIX_TELEMETRY_ENABLED": "false",
                "PHOENIX_DISABLE_AGENT_ASSISTANT": "true",
                "PHOENIX_ENABLE_MCP_SERVER": "false",
                "PHOENIX_ALLOWED_SANDBOX_PROVIDERS": "NONE",
                "PHOENIX_ENABLE_PROMETHEUS": "false",
                "PHOENIX_ENABLE_AUTH": "false",
                "PHOENIX_LOG_MIGRATIONS": "false",
                "PYTHONUNBUFFERED": "1",
                # Belt and braces: no proxies, nothing resolved off-box.
                "NO_PROXY": "*",
                "no_proxy": "*",
            }
        )
        for key in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
            env.pop(key, None)
        env.update(self.extra_env)
        return env

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        http_ok = grpc_ok = False
        while time.monotonic() < deadline:
            self._exited()
            if not http_ok:
                try:
                    with urllib.request.urlopen(f"{self.base_url}/readyz", timeout=2) as resp:
                        http_ok = resp.status == 200
                except (urllib.error.URLError, OSError):
                    http_ok = False
            if http_ok and not grpc_ok:
                try:
                    with socket.create_connection((self.host, self.grpc_port), timeout=2):
                        grpc_ok = True
                except OSError:
                    grpc_ok = False
            if http_ok and grpc_ok:
                return
            time.sleep(0.25)
        raise self._not_ready()

    # -- REST --------------------------------------------------------------

    def get_json(
        self,
        path: str,
        params: Iterable[tuple[str, Any]] | None = None,
        *,
        timeout: float = 30.0,
    ) -> Any:
        """GET ``base_url + path`` and decode JSON (raises HTTPError on >= 400)."""
        url = self.base_url + path
        if params:
            url += "?" + urllib.parse.urlencode([(k, str(v)) for k, v in params])
        req = urllib.request.Request(url, headers={"Accept": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())

    def projects(self) -> list[str]:
        """Names of all projects (``GET /v1/projects``, all pages)."""
        names: list[str] = []
        cursor: str | None = None
        for _ in range(1000):
            params: list[tuple[str, Any]] = [("limit", 100)]
            if cursor:
                params.append(("cursor", cursor))
            body = self.get_json("/v1/projects", params)
            names.extend(p["name"] for p in body.get("data", []))
            cursor = body.get("next_cursor")
            if not cursor:
                return names
        raise PhoenixError("projects: too many pages")

    def spans(
        self,
        project: str = "default",
        *,
        trace_ids: Iterable[str] | None = None,
        page_size: int = 1000,
        max_spans: int = 1_000_000,
        timeout: float = 30.0,
    ) -> list[dict[str, Any]]:
        """All spans of ``project`` in insertion order, following ``next_cursor``.

        Each record: trace_id, span_id, parent_id (hex str or None), name,
        span_kind (OpenInference kind), start_time / end_time (aware datetime),
        start_time_unix_nano / end_time_unix_nano (int, whole microseconds),
        status_code, status_message, attributes (flat dict), events,
        phoenix_id, project.  An unknown project yields ``[]``.
        """
        if not 1 <= page_size <= 1000:
            raise ValueError("page_size must be in 1..1000 (Phoenix's limit)")
        path = "/v1/projects/" + urllib.parse.quote(project, safe="") + "/spans"
        base: list[tuple[str, Any]] = [("limit", page_size), ("sort", "id"), ("order", "asc")]
        base += [("trace_id", t) for t in (trace_ids or ())]
        out: list[dict[str, Any]] = []
        cursor: str | None = None
        deadline = time.monotonic() + timeout
        while True:
            if time.monotonic() > deadline:
                raise PhoenixError(f"spans: reading {project!r} took over {timeout}s")
            params = list(base) + ([("cursor", cursor)] if cursor else [])
            try:
                body = self.get_json(path, params, timeout=timeout)
            except urllib.error.HTTPError as err:
                if err.code == 404 and not out:
                    return []  # the project does not exist (yet)
                raise
            out.extend(_span_record(raw, project) for raw in body.get("data", []))
            cursor = body.get("next_cursor")
            if not cursor:
                return out
            if len(out) > max_spans:
                raise PhoenixError(f"spans: more than {max_spans} spans in {project!r}")

    def wait_for_spans(
        self,
        count: int,
        project: str = "default",
        *,
        timeout: float = 30.0,
        poll_interval: float = 0.25,
        trace_ids: Iterable[str] | None = None,
        exact: bool = False,
    ) -> list[dict[str, Any]]:
        """Poll until ``project`` holds at least ``count`` spans (``exact``: exactly).

        Returns the spans; raises :class:`TimeoutError` after ``timeout`` seconds
        naming how many were seen, and with ``exact`` an AssertionError as soon as
        there are more.  Reaching ``count`` does not prove that no later span is
        still queued: to show "no more than N", read :meth:`spans` again later.
        """
        ids = list(trace_ids or ())
        deadline = time.monotonic() + timeout
        seen: list[dict[str, Any]] = []
        while True:
            seen = self.spans(project, trace_ids=ids or None, timeout=max(1.0, timeout))
            if (len(seen) == count) if exact else (len(seen) >= count):
                return seen
            if exact and len(seen) > count:
                raise AssertionError(f"{len(seen)} spans in {project!r}, expected exactly {count}")
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{len(seen)} spans in {project!r} after {timeout}s, expected "
                    f"{'exactly' if exact else 'at least'} {count}"
                )
            time.sleep(poll_interval)

    # -- network hygiene -----------------------------------------------------

    def sockets(self) -> list[tuple[str, str, str]]:
        """``(state, local, peer)`` of every inet socket of the Phoenix process.

        Read with ``ss -tunapH``; empty if ``ss`` is missing.  Used to prove that
        Phoenix listens on loopback only and talks to nothing else.
        """
        if self._proc is None or shutil.which("ss") is None:
            return []
        out = subprocess.run(
            ["ss", "-tunapH"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
        marker = f"pid={self._proc.pid},"
        rows = []
        for line in out.splitlines():
            if marker not in line:
                continue
            parts = line.split()
            # Netid State Recv-Q Send-Q Local Peer Process
            if len(parts) >= 6:
                rows.append((parts[1], parts[4], parts[5]))
        return rows

    def non_loopback_sockets(self) -> list[tuple[str, str, str]]:
        def loopback(addr: str) -> bool:
            host = addr.rsplit(":", 1)[0].strip("[]")
            if "%" in host:
                host = host.split("%", 1)[0]
            return (
                host.startswith("127.")
                or host == "::1"
                or host.startswith("::ffff:127.")
                or host in ("*", "0.0.0.0", "::")  # unconnected peer column
            )

        bad = []
        for state, local, peer in self.sockets():
            local_host = local.rsplit(":", 1)[0].strip("[]")
            if local_host in ("*", "0.0.0.0", "::") or not loopback(local) or not loopback(peer):
                bad.append((state, local, peer))
        return bad


if __name__ == "__main__":  # manual smoke run: python -m tests.support.phoenix
    with PhoenixServer() as srv:
        print("base_url", srv.base_url)
        print("otlp_http", srv.otlp_http_endpoint)
        print("otlp_grpc", srv.otlp_grpc_endpoint)
        print("sockets", srv.sockets())
        print("projects", srv.projects())
    sys.exit(0)
