"""The docs agree with the code: docs/metrics.md is what docs/generate.py makes of the metric
definitions, docs/spans.md's attribute tables what it makes of ccotel/spans/attributes.py, every
family a running ``ccotel run`` serves is documented there, and every relative
link of README.md, docs/ and bench/ points to a file (and a heading) that exists."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import ModuleType

import pytest

from ccotel.metrics.counters import METRICS, Spec
from tests.support.server import free_port

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
METRICS_MD = DOCS / "metrics.md"
SPANS_MD = DOCS / "spans.md"
FIXTURE_ROOT = ROOT / "tests" / "fixtures" / "s01_bash_tool" / "claude"
COMMAND_PAGES = ("run", "check", "report", "trace", "sessions", "top", "doctor", "relay", "statusline")


@functools.cache
def _generate() -> ModuleType:
    """docs/generate.py (docs/ is not a package)."""
    spec = importlib.util.spec_from_file_location("docs_generate", DOCS / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _documented_prometheus() -> set[str]:
    """The metric names of docs/metrics.md's Prometheus table."""
    text = METRICS_MD.read_text(encoding="utf-8")
    section = text.split("## Prometheus", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([a-z_:][a-z0-9_:]*)` \|", section, re.M))


# -- docs/metrics.md is generated ------------------------------------------------------------------


def test_metrics_md_is_what_generate_makes() -> None:
    assert METRICS_MD.read_text(encoding="utf-8") == _generate().render(), \
        "docs/metrics.md is stale: run `python docs/generate.py`"


def test_every_metric_definition_is_in_the_page() -> None:
    documented = _documented_prometheus()
    exposed = {name + "_total" if spec.kind == "counter" else name for name, spec in METRICS.items()}
    assert exposed <= documented, exposed - documented
    gauges = _generate().gauge_names()
    assert gauges and set(gauges) <= documented
    assert "ccotel_build_info" in documented


def test_a_new_metric_changes_the_page(monkeypatch: pytest.MonkeyPatch) -> None:
    """A metric added to METRICS without regenerating makes the first test fail."""
    monkeypatch.setitem(METRICS, "ccotel_docs_probe", Spec("counter", "A probe.", ("kind",)))
    text = _generate().render()
    assert "| `ccotel_docs_probe_total` | counter | `kind` | A probe. |" in text
    assert text != METRICS_MD.read_text(encoding="utf-8")


# -- docs/spans.md's attribute tables are generated -------------------------------------------------------


def test_spans_md_is_what_generate_makes() -> None:
    page = SPANS_MD.read_text(encoding="utf-8")
    assert page == _generate().render_spans(page), "docs/spans.md is stale: run `python docs/generate.py`"


def test_every_attribute_constant_is_a_row_of_the_page() -> None:
    from ccotel.spans import attributes

    keys = {v for k, v in vars(attributes).items() if k.isupper() and isinstance(v, str)}
    rows = set(re.findall(r"^\| `([a-z0-9_.]+)` \|", SPANS_MD.read_text(encoding="utf-8"), re.M))
    assert len(keys) > 70 and keys <= rows, keys - rows


def test_a_new_attribute_changes_the_page() -> None:
    """An attribute added to the module without regenerating makes the page stale; one without its
    string is refused."""
    generate = _generate()
    source = generate.ATTRIBUTES.read_text(encoding="utf-8")
    added = source + '\nCLAUDE_CODE_DOCS_PROBE: Final = "claude_code.docs_probe"\n"""a probe."""\n'
    page = SPANS_MD.read_text(encoding="utf-8")
    assert "| `claude_code.docs_probe` | a probe. |" in generate.render_spans(page, added)
    with pytest.raises(ValueError, match="CLAUDE_CODE_UNSAID"):
        generate.attributes(source + '\nCLAUDE_CODE_UNSAID: Final = "claude_code.unsaid"\n')


def test_genai_instruments_are_in_the_page() -> None:
    text = METRICS_MD.read_text(encoding="utf-8")
    names = [i.name for i in _generate().genai_instruments()]
    assert len(names) >= 10 and "gen_ai.client.token.usage" in names  # replaced names too
    for name in names:
        assert f"| `{name}` |" in text, name


# -- what a running ccotel serves is documented ----------------------------------------------------


def _scrape(port: int, proc: subprocess.Popen[bytes], log: Path, tries: int = 150) -> str:
    """/metrics once ccotel follows live (its gauges are served from then on); bounded."""
    for _ in range(tries):
        if proc.poll() is not None:
            raise AssertionError(f"ccotel run exited {proc.returncode}: {log.read_text(errors='replace')}")
        if "following live" in log.read_text(errors="replace"):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    return str(r.read().decode())
            except (urllib.error.URLError, ConnectionError):
                pass
        time.sleep(0.2)
    raise AssertionError(f"no /metrics within {tries} tries: {log.read_text(errors='replace')}")


def _serve_and_scrape(tmp_path: Path) -> str:
    """Start ``ccotel run`` on a fixture with metrics on a free loopback port, scrape, SIGTERM, wait.
    A port taken between free_port() and ccotel's bind is tried again, three times at most."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(ROOT)
    for attempt in range(3):
        port = free_port()
        log = tmp_path / f"ccotel-{attempt}.log"
        with open(log, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "ccotel", "run", "--root", str(FIXTURE_ROOT), "--state", "none",
                 "--traces-exporter", "none", "--metrics-addr", f"127.0.0.1:{port}", "--no-status"],
                cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
            try:
                return _scrape(port, proc, log)
            except AssertionError:
                if "Address already in use" not in log.read_text(errors="replace") or attempt == 2:
                    raise
            finally:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
    raise AssertionError("unreachable")


def test_every_family_ccotel_run_serves_is_documented(tmp_path: Path) -> None:
    text = _serve_and_scrape(tmp_path)
    served = set(re.findall(r"^# TYPE (\S+) \S+$", text, re.M))
    assert len(served) > 40 and "ccotel_turns_total" in served and "ccotel_files_watched" in served
    documented = _documented_prometheus()
    assert served - documented == set(), "served but not in docs/metrics.md"
    assert documented - served == set(), "in docs/metrics.md but not served by ccotel run"


# -- the pages are there and their links hold ------------------------------------------------------


def _pages() -> list[Path]:
    pages = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
    pages += [p for p in (ROOT / "bench" / "README.md", ROOT / "bench" / "HISTORY.md") if p.exists()]
    return pages


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\[|\]\([^)]*\)", "", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    out: set[str] = set()
    seen: dict[str, int] = {}
    in_code = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (m := re.match(r"#{1,6} (.+)", line)):
            slug = _slug(m.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    return re.findall(r"\]\(([^)\s]+)\)", text)


def test_every_relative_link_points_to_something_that_exists() -> None:
    checked = 0
    broken = []
    for page in _pages():
        for link in _links(page):
            if re.match(r"[a-z]+:", link):
                continue  # http(s), mailto
            target, _, anchor = link.partition("#")
            dest = (page.parent / target).resolve() if target else page
            checked += 1
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {link}")
            elif anchor and (dest.suffix != ".md" or anchor not in _anchors(dest)):
                broken.append(f"{page.relative_to(ROOT)}: {link} (no such heading)")
    assert broken == []
    assert checked > 30


def test_readme_is_short_and_starts_with_what_to_type() -> None:
    readme = ROOT / "README.md"
    assert readme.stat().st_size <= 10 * 1024
    first = readme.read_text(encoding="utf-8").split("\n## ", 1)[0]
    assert "ccotel run" in first and "bash tests/run.sh" in first
    for name in COMMAND_PAGES:
        assert (DOCS / f"{name}.md").exists(), name
        assert f"(docs/{name}.md)" in readme.read_text(encoding="utf-8"), name
    for folder in ("read", "assemble", "spans", "export", "metrics", "store", "run", "sources", "commands",
                   "rules"):
        assert f"ccotel/{folder}" in readme.read_text(encoding="utf-8"), folder
        assert (ROOT / "ccotel" / folder).is_dir(), folder


def _help(argv: list[str]) -> str:
    from ccotel.cli import build_parser

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        build_parser().parse_args(argv)
    return out.getvalue()


def test_configuration_names_every_option_of_every_command() -> None:
    """docs/configuration.md names every option `ccotel <command> --help` lists."""
    text = (DOCS / "configuration.md").read_text(encoding="utf-8")
    commands = re.search(r"\{([a-z,]+)\}", _help(["--help"]))
    assert commands is not None
    names = commands.group(1).split(",")
    assert set(COMMAND_PAGES) | {"backfill", "hook"} == set(names)  # hook's page: docs/hooks.md
    missing = []
    for name in names:
        options = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", _help([name, "--help"]))) - {"--help"}
        assert options, name
        missing += [f"{name} {opt}" for opt in sorted(options) if f"`{opt}" not in text]
    assert missing == []
