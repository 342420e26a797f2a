"""deploy/ and otel-collector.yaml, each checked by a tool that reads its format, plus ccotel's own parser.

- deploy/ccotel.service: ``systemd-analyze verify --user`` with %h pointed at a temp home whose
  ~/.local/bin/ccotel is this venv's; its ExecStart run for real to hold the unit's exit-status
  policy against what ccotel does (75 when the state dir is held, 0 on SIGTERM, 2 on bad flags).
- deploy/com.ccotel.plist: plistlib, the keys launchd needs, ``plutil -lint`` where there is one (macOS).
- deploy/compose.yaml: the compose-spec JSON schema (check-jsonschema's vendored copy) and
  ``docker-compose config`` (Compose 1.29 from Debian: loads, interpolates and resolves the file with
  no engine); then the wiring between the services read from that resolved config.
- deploy/prometheus.yml: ``promtool check config`` on the files laid out as the compose file mounts them.
- deploy/Dockerfile: hadolint, BuildKit's parser (the ``dockerfile`` package), and a wheel built
  from only the files it copies.
- otel-collector.yaml: NO collector binary can be installed here (not packaged by Debian, PyPI or
  npm), so ``otelcol-contrib validate`` is not run. Its structure is checked against the component
  names and settings of the collector's own docs instead (see COLLECTOR_COMPONENTS).

Tools come from ``python -m tests.support.install_deploy_tools``; a missing one skips locally and
fails under CI (tests/support/fixtures.py).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

try:
    import tests.support  # noqa: F401
except ModuleNotFoundError:  # plain `pytest` does not put the repo root on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ccotel.cli import EXIT_LOCKED, STOP_GRACE_S, build_parser  # noqa: E402
from ccotel.export.sinks import otlp_settings  # noqa: E402
from ccotel.metrics.address import MetricsAddress  # noqa: E402
from tests.support.fixtures import missing_component  # noqa: E402
from tests.support.install_deploy_tools import hadolint_path  # noqa: E402
from tests.support.prometheus import missing_reason, promtool  # noqa: E402
from tests.support.server import free_port  # noqa: E402

yaml = pytest.importorskip("yaml")

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
UNIT = DEPLOY / "ccotel.service"
PLIST = DEPLOY / "com.ccotel.plist"
COMPOSE = DEPLOY / "compose.yaml"
DOCKERFILE = DEPLOY / "Dockerfile"
COLLECTOR = REPO / "otel-collector.yaml"
INSTALL_HINT = "run `python -m tests.support.install_deploy_tools`"
SERVICES = {"ccotel", "otel-collector", "jaeger", "prometheus", "grafana"}


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        missing_component(f"{name} not installed: {INSTALL_HINT}")
    return path


def _run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False, **kwargs)


# --- systemd user unit ---------------------------------------------------------------------------


def _unit(text: str) -> dict[str, list[str]]:
    """``Section.Key`` -> values in order (systemd allows a key more than once)."""
    entries: dict[str, list[str]] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, _, value = line.partition("=")
        entries.setdefault(f"{section}.{key.strip()}", []).append(value.strip())
    return entries


def _home(tmp_path: Path) -> Path:
    """A home for %h: ~/.local/bin/ccotel is this venv's ccotel, ~/.claude an empty root."""
    home = tmp_path / "home"
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".claude" / "projects").mkdir(parents=True)
    ccotel = Path(sys.executable).parent / "ccotel"
    assert ccotel.exists(), f"{ccotel}: ccotel is not installed in this venv (pip install -e .)"
    (home / ".local" / "bin" / "ccotel").symlink_to(ccotel)
    return home


def _verify_user_unit(unit: Path, home: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``systemd-analyze verify --user`` as the unit's user would see it: %h is HOME. A user
    manager needs XDG_RUNTIME_DIR; --man=no: no man pages are looked up for Documentation=."""
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = dict(os.environ, HOME=str(home), XDG_RUNTIME_DIR=str(runtime))
    return _run([_tool("systemd-analyze"), "verify", "--user", "--man=no", str(unit)], env=env, cwd=tmp_path)


def _unit_argv(home: Path) -> list[str]:
    [exec_start] = _unit(UNIT.read_text())["Service.ExecStart"]
    return shlex.split(exec_start.replace("%h", str(home)))


def test_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    home = _home(tmp_path)
    done = _verify_user_unit(UNIT, home, tmp_path)
    # verify exits 0 on unknown keys and bad values too, and says so: any output is a finding.
    assert done.returncode == 0 and not (done.stdout + done.stderr).strip(), done.stdout + done.stderr


def test_systemd_analyze_verify_reports_what_is_wrong(tmp_path: Path) -> None:
    """The check above can fail: a misspelt key, a bad value and a missing binary are all reported."""
    home = _home(tmp_path)
    (home / ".local" / "bin" / "ccotel").unlink()
    text = UNIT.read_text().replace("Restart=on-failure", "Restrat=on-failure").replace(
        "KillMode=mixed", "KillMode=gently")
    broken = tmp_path / "ccotel.service"
    broken.write_text(text)
    out = (lambda d: d.stdout + d.stderr)(_verify_user_unit(broken, home, tmp_path))
    assert "Unknown key 'Restrat'" in out
    assert "gently" in out
    assert "/.local/bin/ccotel is not executable" in out


def test_unit_exec_start_is_accepted_by_ccotel_and_matches_the_sandbox(tmp_path: Path) -> None:
    home = tmp_path / "home"
    unit = _unit(UNIT.read_text())
    argv = _unit_argv(home)
    assert argv[0] == f"{home}/.local/bin/ccotel"
    args = build_parser().parse_args(argv[1:])
    assert args.command == "run"
    assert args.root == [f"{home}/.claude"]
    assert args.state_dir == f"{home}/.local/state/ccotel"
    assert args.metrics_addr.host == "127.0.0.1"  # loopback, as ccotel's default
    # The sandbox: the state dir is the one writable path and exists before the sandbox is built;
    # the root is read-only.
    assert [p.replace("%h", str(home)) for p in unit["Service.ReadWritePaths"]] == [args.state_dir]
    assert [p.replace("%h", str(home)).lstrip("-") for p in unit["Service.ReadOnlyPaths"]] == args.root
    [pre] = unit["Service.ExecStartPre"]
    assert pre.startswith("+") and shlex.split(pre[1:].replace("%h", str(home)))[-1] == args.state_dir
    assert unit["Service.ProtectSystem"] == ["strict"]
    for key in ("NoNewPrivileges", "PrivateTmp"):
        assert unit[f"Service.{key}"] == ["yes"]
    assert unit["Service.MemoryMax"]
    assert unit["Install.WantedBy"] == ["default.target"]


def _seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(ms|s|min)?", value)
    assert match, value
    return float(match.group(1)) * {"ms": 0.001, "s": 1.0, "min": 60.0, None: 1.0}[match.group(2)]


def _wait_for_line(proc: subprocess.Popen[str], needle: str, timeout_s: float) -> list[str]:
    """stderr lines until one holds ``needle`` (bounded; the process's death ends the wait too)."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    assert proc.stderr is not None
    os.set_blocking(proc.stderr.fileno(), False)
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if line:
            seen.append(line)
            if needle in line:
                return seen
        elif proc.poll() is not None:
            break
        else:
            time.sleep(0.05)
    raise AssertionError(f"no {needle!r} within {timeout_s}s; stderr: {''.join(seen)}")


def test_unit_exit_policy_matches_what_ccotel_does(tmp_path: Path) -> None:
    """Run the unit's own commands (ExecStartPre, then ExecStart twice) the way systemd would, and
    hold each exit status against Restart=, RestartPreventExitStatus= and SuccessExitStatus=."""
    home = _home(tmp_path)
    unit = _unit(UNIT.read_text())
    pre = shlex.split(unit["Service.ExecStartPre"][0][1:].replace("%h", str(home)))
    assert _run(pre).returncode == 0
    # The unit's flags, plus a free metrics port and no trace export (the root is empty anyway).
    argv = _unit_argv(home) + ["--metrics-addr", f"127.0.0.1:{free_port()}", "--traces-exporter", "none"]
    env = dict(os.environ, HOME=str(home))
    prevent = {int(v) for line in unit["Service.RestartPreventExitStatus"] for v in line.split()}
    success = {int(v) for line in unit["Service.SuccessExitStatus"] for v in line.split()}
    assert unit["Service.Restart"] == ["on-failure"]

    first = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_line(first, "following live", 30)
        second = _run(argv, env=env)
        # Another ccotel holds the state dir: 75, a failure that is retried (not prevented, not success).
        assert second.returncode == EXIT_LOCKED == 75, second.stderr
        assert EXIT_LOCKED not in prevent | success
        started = time.monotonic()
        first.send_signal(getattr(signal, unit["Service.KillSignal"][0]))
        status = first.wait(timeout=10)
        took = time.monotonic() - started
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=10)
    # Stopped once caught up: 0, which Restart=on-failure leaves stopped.
    assert status == 0, status
    stop_timeout = _seconds(unit["Service.TimeoutStopSec"][0])
    # ccotel's promise (docs/run.md: within 2 s), with slack for a loaded machine; well inside TimeoutStopSec.
    assert took <= min(2.0 + 1.0, stop_timeout), took
    assert STOP_GRACE_S < 2.0 < stop_timeout, "TimeoutStopSec must leave a margin over ccotel's 2 s"
    assert unit["Service.KillMode"] == ["mixed"]  # ccotel stops its own workers
    # A usage error: 2, which must never be restarted.
    bad = _run([*argv, "--no-such-flag"], env=env)
    assert bad.returncode == 2 and "unrecognized arguments" in bad.stderr
    assert 2 in prevent


# --- launchd agent -------------------------------------------------------------------------------


def _plist() -> dict[str, Any]:
    import plistlib

    with PLIST.open("rb") as f:
        doc = plistlib.load(f)
    assert isinstance(doc, dict)
    return doc


def test_plist_loads_with_the_keys_launchd_needs() -> None:
    doc = _plist()
    assert doc["Label"] == "com.ccotel"
    assert doc["RunAtLoad"] is True
    assert doc["KeepAlive"] == {"Crashed": True}  # restarted after a crash only, never after an exit
    assert doc["ExitTimeOut"] > 2  # seconds from SIGTERM to SIGKILL: ccotel needs 2
    log = "__HOME__/Library/Logs/ccotel.log"
    assert doc["StandardOutPath"] == doc["StandardErrorPath"] == log
    strings = [*doc["ProgramArguments"], doc["StandardOutPath"], *doc["EnvironmentVariables"].values()]
    assert all(isinstance(s, str) for s in strings)
    # launchd expands neither ~ nor $VARS: every path is absolute once __HOME__ is filled in.
    assert not [s for s in strings if "~" in s or "$" in s]
    assert not [s for s in strings if "/" in s and not s.startswith(("__HOME__/", "http://"))]


def test_plist_program_arguments_are_accepted_by_ccotel_and_match_the_unit(tmp_path: Path) -> None:
    home = str(tmp_path / "Users" / "someone")
    argv = [a.replace("__HOME__", home) for a in _plist()["ProgramArguments"]]
    assert argv[0] == f"{home}/.local/bin/ccotel"
    args = build_parser().parse_args(argv[1:])
    assert (args.command, args.root, args.state_dir) == ("run", [f"{home}/.claude"], f"{home}/.local/state/ccotel")
    assert vars(args) == vars(build_parser().parse_args(_unit_argv(Path(home))[1:]))  # one configuration


def test_plist_passes_plutil_lint() -> None:
    plutil = shutil.which("plutil")
    if plutil is None:
        pytest.skip("plutil is a macOS tool; the plist is checked by plistlib above")
    done = _run([plutil, "-lint", str(PLIST)])
    assert done.returncode == 0, done.stdout + done.stderr


# --- compose -------------------------------------------------------------------------------------


def _check_jsonschema(path: Path) -> subprocess.CompletedProcess[str]:
    try:
        import check_jsonschema  # noqa: F401
    except ModuleNotFoundError:
        missing_component(f"check-jsonschema not installed: {INSTALL_HINT}")
    return _run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec", str(path)])


def test_compose_file_matches_the_compose_spec_schema(tmp_path: Path) -> None:
    done = _check_jsonschema(COMPOSE)
    assert done.returncode == 0, done.stdout + done.stderr
    typo = tmp_path / "compose.yaml"
    typo.write_text(COMPOSE.read_text().replace("    volumes:\n", "    volumez:\n", 1))
    assert _check_jsonschema(typo).returncode != 0  # the schema check can fail


def _compose_config(compose: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CCOTEL_", "GRAFANA_"))}
    env["HOME"] = str(home)
    return _run([_tool("docker-compose"), "--project-directory", str(compose.parent), "-f", str(compose),
                 "config"], env=env, cwd=compose.parent)


@pytest.fixture(scope="module")
def resolved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """deploy/compose.yaml as docker-compose resolves it (paths absolute, variables filled in)."""
    home = tmp_path_factory.mktemp("home")
    done = _compose_config(COMPOSE, home)
    assert done.returncode == 0, done.stderr
    doc = yaml.safe_load(done.stdout)
    doc["_home"] = str(home)
    return dict(doc)


def test_docker_compose_config_refuses_a_broken_file(tmp_path: Path) -> None:
    """docker-compose config checks what the schema cannot: a dependency on a service that is not there."""
    broken = tmp_path / "compose.yaml"
    broken.write_text(COMPOSE.read_text().replace("      - otel-collector\n", "      - otel-colector\n", 1))
    done = _compose_config(broken, tmp_path)
    assert done.returncode != 0 and "otel-colector" in done.stderr


def _mounts(service: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """container path -> (source, mode) from the resolved short syntax ``source:target:mode``."""
    out: dict[str, tuple[str, str]] = {}
    for volume in service.get("volumes", []):
        source, target, mode = volume.split(":")
        out[target] = (source, mode)
    return out


def _published(service: dict[str, Any]) -> list[str]:
    return [str(p) for p in service.get("ports", [])]


def test_compose_services_images_and_mounts(resolved: dict[str, Any]) -> None:
    services = resolved["services"]
    assert set(services) == SERVICES
    for name, service in services.items():
        if name == "ccotel":
            assert service["build"]["dockerfile"] == "deploy/Dockerfile"
            assert Path(service["build"]["context"]) == REPO
            continue
        image = service["image"]
        assert re.fullmatch(r"[a-z0-9./-]+:v?\d+\.\d+\.\d+", image), f"{name}: pin a version, not {image!r}"
        for source, _mode in _mounts(service).values():
            if source.startswith("/"):
                assert Path(source).exists(), f"{name} mounts {source}, which is not in the repository"
        for port in _published(service):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
    assert set(resolved["volumes"]) == {"ccotel-state", "prometheus-data", "grafana-data"}


def test_compose_ccotel_service(resolved: dict[str, Any]) -> None:
    ccotel = resolved["services"]["ccotel"]
    args = build_parser().parse_args(ccotel["command"])
    mounts = _mounts(ccotel)
    assert args.command == "run"
    # ~/.claude read-only at the root ccotel reads; the state in the named volume.
    [root] = args.root
    assert mounts[root] == (f"{resolved['_home']}/.claude", "ro")
    state_volume = [t for t, (src, mode) in mounts.items() if src == "ccotel-state" and mode == "rw"]
    assert state_volume and args.state_dir.startswith(state_volume[0] + "/")
    # Metrics inside the stack's network only: on all interfaces of the container, never published.
    assert args.metrics_addr.host == "0.0.0.0" and str(args.metrics_addr.port) in ccotel["expose"]
    assert not _published(ccotel)
    assert ccotel["pid"] == "host" and ccotel["init"] is True
    # Traces: what ccotel itself makes of the environment names the collector's OTLP/HTTP port.
    endpoint = otlp_settings(dict(ccotel["environment"])).endpoint
    assert endpoint == "http://otel-collector:4318/v1/traces"
    assert "4318" in resolved["services"]["otel-collector"]["expose"]


def test_prometheus_scrapes_ccotel_in_the_stack(resolved: dict[str, Any]) -> None:
    prometheus_yml = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in prometheus_yml["scrape_configs"]}
    [target] = [t for sc in jobs["ccotel"]["static_configs"] for t in sc["targets"]]
    host, _, port = target.rpartition(":")
    assert host in resolved["services"] and port in resolved["services"][host]["expose"]
    rules = _mounts(resolved["services"]["prometheus"])
    assert rules["/etc/prometheus/rules/ccotel-alerts.yml"] == (str(REPO / "dashboards" / "ccotel-alerts.yml"), "ro")


def test_prometheus_config_passes_promtool_as_mounted(resolved: dict[str, Any], tmp_path: Path) -> None:
    """promtool check config on the container's file layout, built from the compose file's mounts:
    the rule file must be where prometheus.yml says, and must load."""
    reason = missing_reason()
    if reason:
        missing_component(reason)
    prometheus = resolved["services"]["prometheus"]
    for target, (source, _mode) in _mounts(prometheus).items():
        if source.startswith("/"):
            place = tmp_path / target.lstrip("/")
            place.parent.mkdir(parents=True, exist_ok=True)
            place.symlink_to(source)
    config = next(a.split("=", 1)[1] for a in prometheus["command"] if a.startswith("--config.file="))
    code, out = promtool("check", "config", str(tmp_path / config.lstrip("/")))
    assert code == 0, out
    assert "SUCCESS: 1 rule files found" in out, out
    rules = re.search(r"SUCCESS: (\d+) rules found", out)  # the rule file itself loaded
    assert rules and int(rules.group(1)) > 0, out


def test_grafana_provisioning(resolved: dict[str, Any]) -> None:
    grafana = resolved["services"]["grafana"]
    mounts = _mounts(grafana)
    provisioning = mounts["/etc/grafana/provisioning"][0]
    assert Path(provisioning) == DEPLOY / "grafana" / "provisioning"
    sources = yaml.safe_load((Path(provisioning) / "datasources" / "ccotel.yaml").read_text())
    assert sources["apiVersion"] == 1
    by_type = {s["type"]: s for s in sources["datasources"]}
    assert set(by_type) == {"prometheus", "jaeger"}
    for source in by_type.values():  # each URL names a service of the stack and a port it listens on
        host, _, port = source["url"].removeprefix("http://").rpartition(":")
        assert host in resolved["services"] and port in resolved["services"][host]["expose"], source["url"]
    [provider] = yaml.safe_load((Path(provisioning) / "dashboards" / "ccotel.yaml").read_text())["providers"]
    assert provider["type"] == "file"
    # The provider reads the mount of the whole dashboards/ directory (not named files).
    assert mounts[provider["options"]["path"]] == (str(REPO / "dashboards"), "ro")


def _datasource_refs(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        found = [node["datasource"]] if isinstance(node.get("datasource"), dict) else []
        return found + [r for key, value in node.items() if key != "datasource" for r in _datasource_refs(value)]
    if isinstance(node, list):
        return [r for item in node for r in _datasource_refs(item)]
    return []


def test_every_dashboard_finds_its_data_source() -> None:
    """Whatever dashboards/*.json holds now: each data source a panel, target or variable queries is
    a provisioned uid, Grafana's own, or a `datasource` variable over a provisioned type. A ${DS_...}
    of an exported dashboard's __inputs is none of these: file provisioning leaves it unresolved.
    (A datasource variable nothing queries, e.g. one for trace links to an optional Tempo, may name
    a type this stack does not run.)"""
    provisioned = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/ccotel.yaml").read_text())
    uids = {s["uid"] for s in provisioned["datasources"]}
    types = {s["type"] for s in provisioned["datasources"]}
    dashboards = sorted((REPO / "dashboards").glob("*.json"))
    assert dashboards
    for path in dashboards:
        doc = json.loads(path.read_text())
        variables = {v["name"]: v.get("query") for v in doc.get("templating", {}).get("list", [])
                     if v.get("type") == "datasource"}
        queried = 0
        for ref in _datasource_refs(doc):
            uid = str(ref.get("uid", ""))
            name = re.fullmatch(r"\$\{?(\w+)\}?", uid)
            if name:
                assert name.group(1) in variables, f"{path.name}: {uid} is not a datasource variable"
                assert variables[name.group(1)] in types, f"{path.name}: {uid} is over an unprovisioned type"
                queried += 1
            elif uid and uid != "-- Grafana --":
                assert uid in uids, f"{path.name}: data source uid {uid!r} is not provisioned ({sorted(uids)})"
                queried += 1
        assert queried, f"{path.name} queries no data source"


# --- Dockerfile ----------------------------------------------------------------------------------


def test_dockerfile_passes_hadolint() -> None:
    hadolint = hadolint_path()
    if hadolint is None:
        missing_component(f"hadolint not installed: {INSTALL_HINT}")
    done = _run([hadolint, "--no-color", str(DOCKERFILE)])
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def _instructions() -> list[Any]:
    try:
        import dockerfile
    except ModuleNotFoundError:
        missing_component(f"dockerfile (BuildKit's parser) not installed: {INSTALL_HINT}")
    return list(dockerfile.parse_file(str(DOCKERFILE)))


def test_dockerfile_runs_ccotel_with_flags_it_accepts() -> None:
    commands = {c.cmd: c for c in _instructions()}
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", commands["FROM"].value[0])
    assert commands["ENTRYPOINT"].json and commands["ENTRYPOINT"].value == ("ccotel",)
    assert commands["CMD"].json
    args = build_parser().parse_args(list(commands["CMD"].value))
    assert args.command == "run" and args.metrics_addr == MetricsAddress("0.0.0.0", 9477)


def test_the_image_installs_from_only_what_the_dockerfile_copies(tmp_path: Path) -> None:
    """Copy exactly the COPY sources, build the wheel `pip install .` would build, and check that
    deploy/Dockerfile.dockerignore keeps each source in the build context."""
    sources = [s for c in _instructions() if c.cmd == "COPY" for s in c.value[:-1]]
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    kept = {line.strip().lstrip("!").rstrip("/") for line in ignore if line.strip().startswith("!")}
    assert set(sources) <= kept, f"COPY sources the .dockerignore leaves out: {set(sources) - kept}"
    src = tmp_path / "src"
    src.mkdir()
    for source in sources:
        origin = REPO / source
        if origin.is_dir():
            shutil.copytree(origin, src / source, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(origin, src / source)
    # setuptools' own PEP 517 hook, as the build behind `pip install .` calls it, on exactly these files
    # (no download of a fresh setuptools and wheel: tests stay off the network). The sdist holds the
    # package and the metadata setuptools made from them, entry points included.
    out = tmp_path / "out"
    out.mkdir()
    hook = "import sys; from setuptools import build_meta as b; print(b.build_sdist(sys.argv[1]))"
    done = _run([sys.executable, "-c", hook, str(out)], cwd=src)
    assert done.returncode == 0, done.stdout + done.stderr
    with tarfile.open(out / done.stdout.split()[-1]) as tar:
        names = {n.split("/", 1)[1]: n for n in tar.getnames() if "/" in n}
        assert {"ccotel/cli.py", "ccotel/__init__.py", "pyproject.toml", "README.md"} <= set(names)
        entry_points = tar.extractfile(names["ccotel.egg-info/entry_points.txt"])
        assert entry_points is not None and "ccotel = ccotel.__main__:main" in entry_points.read().decode()


# --- the collector config (structure only: no collector binary here) -------------------------------

#: Component types and the settings used here, as documented by the collector: the otlp receiver,
#: memory_limiter and batch processors and debug exporter READMEs, and the v0.144.0 rename of the
#: OTLP exporters to otlp_grpc / otlp_http (open-telemetry/opentelemetry-collector#14403, #14397).
COLLECTOR_COMPONENTS: dict[str, set[str]] = {
    "receivers": {"otlp"},
    "processors": {"memory_limiter", "batch"},
    "exporters": {"otlp_grpc", "otlp_http", "debug"},
}
#: Old names: `logging` is gone, `otlp` and `otlphttp` (exporters) are deprecated aliases.
DEPRECATED_EXPORTERS = {"logging", "otlp", "otlphttp"}
ENV_REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _resolve(text: str, env: dict[str, str]) -> Any:
    """The config with ${env:NAME:-default} filled in as the collector's env provider does."""
    leftover = ENV_REF.sub("", text)
    assert "${" not in leftover, "a ${...} reference that is not ${env:NAME} or ${env:NAME:-default}"

    def value(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        assert name in env or default is not None, f"{name} is unset and has no default"
        return env.get(name, default or "")

    return yaml.safe_load(ENV_REF.sub(value, text))


def _component_type(component_id: str) -> str:
    return component_id.split("/", 1)[0]


def test_collector_config_structure() -> None:
    text = COLLECTOR.read_text()
    config = _resolve(text, {})
    pipelines = config["service"]["pipelines"]
    used: dict[str, set[str]] = {kind: set() for kind in COLLECTOR_COMPONENTS}
    for name, pipeline in pipelines.items():
        assert _component_type(name) in {"traces", "metrics", "logs"}
        for kind in COLLECTOR_COMPONENTS:
            for component in pipeline.get(kind, []):
                assert component in config[kind], f"pipeline {name} uses {component}, not defined"
                used[kind].add(component)
    for kind, known in COLLECTOR_COMPONENTS.items():
        for component in config.get(kind, {}):
            assert _component_type(component) in known, f"{kind}: unknown component {component}"
            assert component in used[kind], f"{kind}: {component} is defined but in no pipeline"
    exporter_types = {_component_type(e) for e in config["exporters"]}
    assert not exporter_types & DEPRECATED_EXPORTERS
    # Nor in the commented-out alternatives.
    assert not re.search(r"^\s*#\s*(otlphttp|otlp|logging)(/\w+)?:\s*$", text, re.MULTILINE)
    traces = pipelines["traces"]
    assert traces["processors"][0] == "memory_limiter"
    limiter = config["processors"]["memory_limiter"]
    assert limiter["check_interval"] and ("limit_mib" in limiter or "limit_percentage" in limiter)


def test_collector_answers_for_the_backend_only_once_it_has_the_spans() -> None:
    """ccotel checkpoints on the backend's answer: no batch processor in the traces pipeline, and
    every backend exporter sends synchronously without retrying, within ccotel's own timeout."""
    config = _resolve(COLLECTOR.read_text(), {})
    assert "batch" not in config["service"]["pipelines"]["traces"].get("processors", [])
    ccotel_timeout = otlp_settings({}).transport.timeout_s
    for name, exporter in config["exporters"].items():
        if _component_type(name) == "debug":
            continue
        assert exporter["sending_queue"]["enabled"] is False, name
        assert exporter["retry_on_failure"]["enabled"] is False, name
        assert _seconds(exporter["timeout"]) < ccotel_timeout, name


def test_collector_endpoints_alone_and_in_the_stack(resolved: dict[str, Any]) -> None:
    text = COLLECTOR.read_text()
    # Alone: loopback only, on the port ccotel's default endpoint names.
    alone = _resolve(text, {})["receivers"]["otlp"]["protocols"]
    assert alone["grpc"]["endpoint"] == "127.0.0.1:4317"
    assert alone["http"]["endpoint"] == "127.0.0.1:4318"
    assert otlp_settings({}).endpoint == "http://localhost:4318/v1/traces"
    # In the stack: the compose file mounts this very file and sets every variable it reads.
    collector = resolved["services"]["otel-collector"]
    config_path = next(a.split("=", 1)[1] for a in collector["command"] if a.startswith("--config="))
    assert _mounts(collector)[config_path] == (str(COLLECTOR), "ro")
    env = {k: str(v) for k, v in collector["environment"].items()}
    assert set(env) == {m.group(1) for m in ENV_REF.finditer(text)}
    stacked = _resolve(text, env)
    protocols = stacked["receivers"]["otlp"]["protocols"]
    assert protocols["http"]["endpoint"] == "0.0.0.0:4318" and protocols["grpc"]["endpoint"] == "0.0.0.0:4317"
    host, _, port = stacked["exporters"]["otlp_grpc/jaeger"]["endpoint"].rpartition(":")
    assert host == "jaeger" and port in resolved["services"]["jaeger"]["expose"]
    # Jaeger takes OTLP on that port on all of its interfaces.
    assert f"--set=receivers.otlp.protocols.grpc.endpoint=0.0.0.0:{port}" in resolved["services"]["jaeger"]["command"]
