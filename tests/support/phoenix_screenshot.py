"""Look at what users see: a fixture's traces in a real Phoenix, screenshotted by headless Chromium.

    python -m tests.support.phoenix_screenshot 2.1.330-s13_advisor /tmp/trace.png

Starts Phoenix on loopback, backfills the fixture over OTLP/HTTP, opens the trace view of the
fixture's biggest trace in Debian's chromium (headless, no network but loopback) and writes the PNG.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections import Counter

from ccotel.export.sinks import ExportQueue, OtlpSink
from ccotel.run.pipeline import Options, Pipeline
from tests.harness.fixtures import load_fixture
from tests.support.phoenix import PhoenixServer


def screenshot(fixture: str, out: str, width: int = 1600, height: int = 1000) -> str:
    fx = load_fixture(fixture)
    with PhoenixServer() as phoenix:
        project = fixture.replace("/", "-")
        env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": phoenix.otlp_http_endpoint,
               "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={project}"}
        queue = ExportQueue(OtlpSink(env))
        pipeline = Pipeline(Options(roots=(str(fx.config_dir),)), emit=queue.submit)
        pipeline.backfill(close_all=True)
        assert queue.close(timeout_s=60)
        spans = phoenix.wait_for_spans(pipeline.stats.spans, project=project, timeout=60)
        trace = Counter(s["trace_id"] for s in spans).most_common(1)[0][0]
        body = phoenix.get_json("/v1/projects", [("limit", 100)])
        project_id = next(p["id"] for p in body["data"] if p["name"] == project)
        url = f"{phoenix.base_url}/projects/{project_id}/traces/{trace}"
        with tempfile.TemporaryDirectory() as profile:
            subprocess.run(
                ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={profile}", f"--window-size={width},{height}", "--virtual-time-budget=15000",
                 f"--screenshot={out}", url],
                check=True, timeout=120, capture_output=True)
        return url


if __name__ == "__main__":
    print(screenshot(sys.argv[1], sys.argv[2]))
