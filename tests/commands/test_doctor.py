"""``ccotel doctor``: each check against the real thing it looks at.

Roots are temp copies of the committed real-CLI fixtures (both versions of the matrix) and of
shared/realdata; permission denied is real (chmod 000, read by an unprivileged user when the suite
runs as root); the trace backends are real OTLP receivers on 127.0.0.1 (tests/support/otlp.py)
or a port nobody listens on; the metrics port is served by ccotel's own metrics server
(ccotel.metrics.server) or another HTTP server; the state is written by a real ``ccotel backfill``;
the lock is held by another process.
"""

from __future__ import annotations

import argparse
import dataclasses
import http.server
import io
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import grpc
import pytest

from ccotel import __version__
from ccotel.commands.doctor import command as doctor
from ccotel.commands.doctor import roots as doctor_roots
from ccotel.commands.doctor.config import DoctorConfig
from ccotel.commands.doctor.finding import Finding, Level, exit_status
from ccotel.commands.doctor.lock import probe_lock
from ccotel.commands.doctor.render import render_text
from ccotel.commands.doctor.root_scan import SAMPLE_LINES, Denied, read_tail
from ccotel.commands.doctor.wording import user_name
from ccotel.metrics.address import MetricsAddress
from ccotel.metrics.counters import Metrics
from ccotel.metrics.server import serve
from ccotel.read.discover import scan
from ccotel.rules.versions import TESTED_CLAUDE_CODE_VERSIONS, VersionStanding, judge_version
from ccotel.store.sqlite import SCHEMA_VERSION
from ccotel.store.state import StateLocked
from ccotel.store.statedir import lock_state_dir
from tests.harness.install import VERSIONS
from tests.support import ccusage as _ccusage
from tests.support.fixtures import missing_component
from tests.support.otlp import GrpcAnswer, HttpAnswer, OtlpReceiver, refuse

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
OLD, NEW = VERSIONS[0], VERSIONS[-1]
NOBODY = 65534


# -- helpers -------------------------------------------------------------------------------------


def fixture_root(dest: Path, *scenarios: str) -> Path:
    """A Claude config dir holding the projects of real-CLI fixtures ("s01_bash_tool" is 2.1.197's,
    "2.1.330/s03_parallel_subagents" 2.1.330's)."""
    dest.mkdir(parents=True, exist_ok=True)
    for scenario in scenarios:
        shutil.copytree(FIXTURES / scenario / "claude" / "projects", dest / "projects", dirs_exist_ok=True)
    return dest


def config(tmp_path: Path, roots: tuple[Path, ...] = (), *, env: Mapping[str, str] | None = None,
           state_dir: str | None = None, metrics_addr: str | None = None, traces_exporter: str = "none",
           managed: Path | None = None) -> DoctorConfig:
    """Every check pointed at something this test owns (nothing of the machine's own)."""
    return DoctorConfig(roots=tuple(str(r) for r in roots), state_dir=state_dir, metrics_addr=metrics_addr,
                        traces_exporter=traces_exporter, env=dict(env or {}),
                        managed_settings=str(managed or tmp_path / "no-managed-settings.json"), timeout_s=2.0)


def of(findings: list[Finding], check: str) -> list[Finding]:
    return [f for f in findings if f.check == check]


def one(findings: list[Finding], check: str, level: Level | None = None) -> Finding:
    found = [f for f in of(findings, check) if level is None or f.level is level]
    assert len(found) == 1, f"{check}/{level}: {[f.as_dict() for f in of(findings, check)]}"
    return found[0]


def free_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def doctor_parser() -> argparse.ArgumentParser:
    """The parser cli.py builds for doctor: its common --root, durable --state-dir, doctor's own."""
    p = argparse.ArgumentParser(prog="ccotel doctor")
    p.add_argument("--root", action="append", default=None)
    p.add_argument("--state-dir", default=None)
    doctor.add_arguments(p)
    return p


DOCTOR_SCRIPT = (  # doctor_parser() again: the test module itself is not imported by the child
    "import argparse, sys\n"
    "from ccotel.commands.doctor import command as doctor\n"
    "p = argparse.ArgumentParser(prog='ccotel doctor')\n"
    "p.add_argument('--root', action='append', default=None)\n"
    "p.add_argument('--state-dir', default=None)\n"
    "doctor.add_arguments(p)\n"
    "sys.exit(doctor.run(p.parse_args(sys.argv[1:])))\n"
)


# Root reads anything: as root, the child runs without the two capabilities that let it
# (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), so a chmod 000 holds for it as for any user.
WITHOUT_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search",
               "--inh-caps=-dac_override,-dac_read_search", "--"]


def unprivileged(cmd: list[str]) -> list[str]:
    return WITHOUT_DAC + cmd if os.geteuid() == 0 else cmd


def run_doctor_process(args: list[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(unprivileged([sys.executable, "-c", DOCTOR_SCRIPT, *args]), cwd=REPO,
                          env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=60)


# -- the tested matrix ---------------------------------------------------------------------------


def test_tested_versions_are_the_harness_matrix() -> None:
    assert TESTED_CLAUDE_CODE_VERSIONS == VERSIONS


def test_judge_version_against_the_matrix() -> None:
    assert {judge_version(v).standing for v in VERSIONS} == {VersionStanding.TESTED}
    between = judge_version("2.1.250")
    assert between.standing is VersionStanding.BETWEEN and f"{OLD} and {NEW}" in between.note
    major, minor, patch = NEW.split(".")
    newer = judge_version(f"{major}.{minor}.{int(patch) + 1}")  # the release after the newest tested
    assert newer.standing is VersionStanding.NEWER
    assert "not tested yet" in newer.note and "ccotel_format_unknown_total" in newer.note
    assert judge_version("2.2.0-beta.1").standing is VersionStanding.NEWER
    older = judge_version("2.1.20")
    assert older.standing is VersionStanding.OLDER and "older format" in older.note
    assert any("output_tokens" in n for n in older.notes)  # 2.1.12-2.1.29 never wrote the final count
    assert judge_version("1.0.17").standing is VersionStanding.OLDER
    assert judge_version("not-a-version").standing is VersionStanding.UNREADABLE


# -- roots, versions, format ---------------------------------------------------------------------


def test_fixture_roots_of_both_versions(tmp_path: Path) -> None:
    root = fixture_root(tmp_path / "claude", "s01_bash_tool", "s05_nested_subagent",
                        f"{NEW}/s03_parallel_subagents", f"{NEW}/s05_nested_subagent")
    files = list(scan(str(root)))  # what ccotel run would read
    mains = sum(f.session_id is not None and f.agent_id is None for f in files)
    findings = doctor.diagnose(config(tmp_path, (root,)))

    roots = one(findings, "roots")
    assert roots.level is Level.OK
    assert roots.data == {"sessions": mains, "subagents": len(files) - mains}
    assert mains == 4 and len(files) > mains
    versions = one(findings, "versions")
    assert versions.level is Level.OK and versions.data["standing"] == "tested"
    assert set(versions.data["versions"]) == {OLD, NEW}  # type: ignore[arg-type]
    fmt = one(findings, "format")
    assert fmt.level is Level.OK and fmt.data["files"] == len(files)
    assert exit_status(findings) == 0


def test_unknown_line_type_and_field_are_warned(tmp_path: Path) -> None:
    root = fixture_root(tmp_path / "claude", f"{NEW}/s01_bash_tool")
    main = next(p for p in (root / "projects").rglob("*.jsonl"))
    last = json.loads(main.read_text().splitlines()[-1])
    new_type = {"type": "session-weather", "sessionId": last["sessionId"], "version": NEW, "forecast": "sunny"}
    assistant = next(json.loads(line) for line in reversed(main.read_text().splitlines())
                     if json.loads(line).get("type") == "assistant")
    assistant = {**assistant, "uuid": "0f6c2c1e-0000-4000-8000-000000000001", "moodRing": "teal"}
    with main.open("a") as f:
        f.write(json.dumps(new_type) + "\n" + json.dumps(assistant) + "\n")

    findings = doctor.diagnose(config(tmp_path, (root,)))
    fmt = of(findings, "format")
    types = next(f for f in fmt if "line types" in f.message)
    fields = next(f for f in fmt if "fields" in f.message)
    assert types.level is Level.WARN and f"session-weather (1 line, version {NEW})" in types.message
    assert types.data["line_types"] == {"session-weather": {"lines": 1, "versions": [NEW]}}
    assert fields.level is Level.WARN and fields.data["fields"] == {"assistant.moodRing": [NEW]}
    assert "ccotel_format_unknown_total" in types.fix
    assert exit_status(findings) == 0  # a warning, not a failure


def test_version_outside_the_matrix(tmp_path: Path) -> None:
    root = fixture_root(tmp_path / "claude", f"{NEW}/s01_bash_tool")
    main = next(p for p in (root / "projects").rglob("*.jsonl"))
    lines = main.read_text().splitlines()
    newer = [json.dumps({**json.loads(line), "version": "2.1.400"}) for line in lines[-3:]]
    with main.open("a") as f:
        f.write("\n".join(newer) + "\n")

    findings = doctor.diagnose(config(tmp_path, (root,)))
    warned = one(findings, "versions", Level.WARN)
    assert warned.data == {"standing": "newer", "versions": {"2.1.400": 1}}
    assert "not tested yet" in warned.message and "ccotel_format_unknown_total" in warned.message
    assert one(findings, "versions", Level.OK).data["versions"] == {NEW: 1}  # older lines of the same tail


@pytest.fixture(scope="module")
def realdata_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not _ccusage.realdata_dir().is_dir():
        missing_component(f"no realdata at {_ccusage.realdata_dir()}")
    return _ccusage.realdata_tree(tmp_path_factory.mktemp("realdata") / "claude")


def test_realdata_versions_older_and_between(tmp_path: Path, realdata_root: Path) -> None:
    """Public transcripts of 1.0.17 to 2.1.237: every version is older or between, none tested."""
    findings = doctor.diagnose(config(tmp_path, (realdata_root,)))
    versions = {f.data["standing"]: f for f in of(findings, "versions")}
    assert set(versions) == {"older", "between"}
    older = versions["older"].data["versions"]
    between = versions["between"].data["versions"]
    assert "1.0.17" in older and "2.1.42" in older  # type: ignore[operator]
    assert all(judge_version(v).standing is VersionStanding.BETWEEN for v in between)  # type: ignore[union-attr]
    assert "output_tokens" in versions["older"].message  # 2.1.12-2.1.29 are among them
    # many versions read as their range (issue 28: a 12-line list of 35 versions); --json has each
    assert versions["older"].message.startswith(f"{len(older)} versions, 1.0.17 to 2.1.42 (")  # type: ignore[arg-type]
    assert one(findings, "format").level is Level.OK  # rules.py knows everything these wrote
    assert one(findings, "roots").level is Level.OK


def test_read_tail_reads_only_the_end(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    long_line = json.dumps({"type": "user", "pad": "x" * 100_000}).encode()
    path.write_bytes(b"\n".join([json.dumps({"n": i}).encode() for i in range(5000)] + [long_line, b'{"partial":']))
    got = read_tail(str(path), size=1024)
    assert got is not None and len(got) == SAMPLE_LINES
    assert got[-3:] == [b'{"n": 4999}', long_line, b'{"partial":']  # the window grew to hold the long line
    assert got[0] == b'{"n": 4982}'
    assert read_tail(str(path), size=64, lines=3) == [b'{"n": 4999}', long_line, b'{"partial":']
    capped = read_tail(str(path), size=64, max_size=4096, lines=3)
    assert capped == [b'{"partial":']  # a line longer than the cap is not sampled (nor read whole)
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    assert read_tail(str(fifo)) is None  # does not block on a FIFO


def test_missing_root_and_no_projects(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    findings = doctor.diagnose(config(tmp_path, (tmp_path / "absent", empty)))
    missing, no_projects, none_at_all = of(findings, "roots")
    assert missing.level is Level.WARN and missing.message == "does not exist" and "--root" in missing.fix
    assert no_projects.level is Level.WARN and "no projects/" in no_projects.message
    assert none_at_all.level is Level.WARN and "no transcript under any root" in none_at_all.message
    assert of(findings, "versions") == [] and of(findings, "format") == []


def test_unreadable_directory_and_file_fail_with_the_fix(tmp_path: Path) -> None:
    """chmod 000 on a subagents directory, a transcript and a whole root, read by a process the
    permissions apply to (as root: one without the capabilities that bypass them)."""
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        pytest.skip("running as root and no setpriv to drop CAP_DAC_OVERRIDE: permission checks are meaningless")
    good = fixture_root(tmp_path / "good", "s01_bash_tool", f"{NEW}/s03_parallel_subagents")
    locked_root = fixture_root(tmp_path / "locked", "s02_resume_two_turns")
    args = ["--root", str(good), "--root", str(locked_root), "--json", "--state-dir", "none",
            "--traces-exporter", "none", "--metrics-addr", "none"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}

    before = run_doctor_process(args, env)  # the control: all readable
    assert before.returncode == 0, before.stdout + before.stderr

    project = next(p for p in (good / "projects").iterdir() if any(p.rglob("subagents")))
    subagent_dir = next(project.rglob("subagents"))
    other_project = next(p for p in (good / "projects").iterdir() if p != project)
    transcript = next(other_project.glob("*.jsonl"))
    locked = [subagent_dir, transcript, locked_root]
    try:
        for p in locked:
            p.chmod(0o000)
        probe = subprocess.run(unprivileged(["cat", str(transcript)]), capture_output=True, timeout=10)
        if probe.returncode == 0:
            pytest.skip("a chmod 000 file can still be read here: permission checks are meaningless")
        after = run_doctor_process(args, env)
    finally:
        for p in locked:
            p.chmod(0o755)
    doc = json.loads(after.stdout)
    assert after.returncode == 1 and doc["exit_status"] == 1 and doc["status"] == "fail", after.stderr
    fails = {f["subject"]: f for f in doc["findings"] if f["level"] == "fail"}
    assert set(fails) == {str(good), str(locked_root)}
    denied = {d["path"]: d for d in fails[str(good)]["data"]["denied"]}
    assert set(denied) == {str(subagent_dir), str(transcript)}
    assert denied[str(subagent_dir)] == {"path": str(subagent_dir), "is_dir": True, "reason": "permission denied"}
    assert denied[str(transcript)] == {"path": str(transcript), "is_dir": False, "reason": "permission denied"}
    message = fails[str(good)]["message"]
    assert message.startswith("permission denied: 1 directory ccotel cannot list: the transcripts in them are never "
                              "seen, and nothing counts them; 1 file ccotel cannot open: skipped, each counted once")
    me = user_name(os.geteuid())  # the files are ours: the fix is a chmod
    assert fails[str(good)]["fix"] == (f"they are {me}'s but not readable: chmod -R u+rX {transcript} "
                                       f"{subagent_dir}")  # in the order walked: s01's project sorts first
    assert fails[str(locked_root)]["message"] == "cannot be read (Permission denied)"
    ok = next(f for f in doc["findings"] if f["check"] == "roots" and f["level"] == "ok")
    # the readable session is counted; the denied one and the subagents behind the locked directory are not
    assert ok["subject"] == str(good) and ok["data"] == {"sessions": 1, "subagents": 0}


def test_access_fix_names_the_owner(tmp_path: Path) -> None:
    """Files of another user: run ccotel as that user, or grant read to this one (setfacl)."""
    path = tmp_path / "t.jsonl"
    path.write_text("{}\n")
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    os.chown(path, NOBODY, NOBODY)
    fix = doctor_roots._access_fix([Denied(str(path), False, "permission denied")])  # noqa: SLF001
    assert fix == (f"run ccotel as nobody (the user Claude Code writes as), or let root read them: "
                   f"setfacl -R -m u:root:rX {path}")


# -- state ---------------------------------------------------------------------------------------


def backfill(root: Path, state_dir: Path) -> None:
    """A real ccotel backfill, in its own process (it installs signal handlers)."""
    done = subprocess.run([sys.executable, "-m", "ccotel", "backfill", "--root", str(root), "--state-dir",
                           str(state_dir), "--traces-exporter", "none", "--workers", "1"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_state_written_by_a_real_backfill(tmp_path: Path) -> None:
    root = fixture_root(tmp_path / "claude", "s01_bash_tool", f"{NEW}/s03_parallel_subagents")
    state_dir = tmp_path / "state"
    backfill(root, state_dir)
    db = sqlite3.connect(f"file:{state_dir / 'state.db'}?mode=ro&immutable=1", uri=True)  # creates no -wal
    checkpointed = db.execute("SELECT COUNT(*) FROM files").fetchone()[0]
    db.close()
    before = sorted(os.listdir(state_dir))

    findings = doctor.diagnose(config(tmp_path, (root,), state_dir=str(state_dir)))
    state = of(findings, "state")
    assert [f.level for f in state] == [Level.OK, Level.OK, Level.OK]
    assert state[0].data["mode"] == "0700"
    assert state[1].data["files_checkpointed"] == checkpointed == len(list(scan(str(root))))
    assert state[1].data["schema"] == str(SCHEMA_VERSION)
    assert state[2].message.startswith("free: no ccotel runs on this state dir")
    assert sorted(os.listdir(state_dir)) == before  # doctor created nothing (no -wal/-shm, no lock file)


def test_state_faults(tmp_path: Path) -> None:
    root = fixture_root(tmp_path / "claude", "s01_bash_tool")
    state_dir = tmp_path / "state"
    backfill(root, state_dir)

    state_dir.chmod(0o755)
    warned = of(doctor.diagnose(config(tmp_path, state_dir=str(state_dir))), "state")[0]
    assert warned.level is Level.WARN and "0755" in warned.message and warned.fix == f"chmod 700 {state_dir}"
    state_dir.chmod(0o700)

    db = sqlite3.connect(state_dir / "state.db")
    with db:
        db.execute("UPDATE meta SET value='99' WHERE key='schema'")
    db.close()
    failed = of(doctor.diagnose(config(tmp_path, state_dir=str(state_dir))), "state")[1]
    assert failed.level is Level.FAIL and "schema 99" in failed.message and "refuse" in failed.message
    db = sqlite3.connect(state_dir / "state.db")
    with db:
        db.execute("UPDATE meta SET value='2' WHERE key='schema'")  # an older ccotel's: migrated, not refused
    db.close()
    older = of(doctor.diagnose(config(tmp_path, state_dir=str(state_dir))), "state")[1]
    assert older.level is Level.OK and "migrates it" in older.message

    (state_dir / "state.db").write_bytes(b"this is not a database" * 100)
    corrupt = of(doctor.diagnose(config(tmp_path, state_dir=str(state_dir))), "state")[1]
    assert corrupt.level is Level.WARN and "moves it aside" in corrupt.message

    absent = tmp_path / "not-yet" / "state"
    created = one(doctor.diagnose(config(tmp_path, state_dir=str(absent))), "state")
    assert created.level is Level.OK and "creates it" in created.message
    assert not (tmp_path / "not-yet").exists()

    nowhere = one(doctor.diagnose(config(tmp_path, state_dir=None)), "state")
    assert nowhere.level is Level.WARN and "no checkpoints" in nowhere.message


HOLD_LOCK = (  # a running ccotel, as far as the state dir can tell: the lock, and a database open for writing
    "import sys\n"
    "from ccotel.store.sqlite import SqliteState as State\n"
    "from ccotel.store.statedir import lock_state_dir\n"
    "from ccotel.store.state import Commit\n"
    "lock = lock_state_dir(sys.argv[1])\n"
    "state = State(sys.argv[1])\n"
    "assert state.commit(Commit(offsets={f'/r/projects/p/{i}.jsonl': (None, 10 * i, 10 * i, None)\n"
    "                                    for i in range(3)}))\n"
    "print('locked', flush=True)\n"
    "sys.stdin.read()\n"
)


@pytest.fixture
def held_lock(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    state_dir = tmp_path / "state"
    proc = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(state_dir)], cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        yield state_dir, proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def test_lock_held_by_another_process(tmp_path: Path, held_lock: tuple[Path, subprocess.Popen[str]]) -> None:
    state_dir, proc = held_lock
    files = sorted(os.listdir(state_dir))
    assert "state.db-wal" in files  # the writer's WAL: doctor reads it read-only, beside the writer
    db, lock = of(doctor.diagnose(config(tmp_path, state_dir=str(state_dir))), "state")[1:]
    assert db.level is Level.OK and db.data["files_checkpointed"] == 3
    assert sorted(os.listdir(state_dir)) == files
    assert lock.level is Level.OK and f"held by pid {proc.pid}" in lock.message and "exit 75" in lock.message
    assert lock.data["how"] == "proc-locks" and lock.data["holder"] == proc.pid and lock.data["pid_alive"] is True
    with pytest.raises(StateLocked) as taken:  # doctor did not disturb it: the holder still has it
        lock_state_dir(str(state_dir))
    assert taken.value.pid == proc.pid

    # Without /proc/locks: the shared non-blocking probe, released at once.
    probe = probe_lock(str(state_dir / "ccotel.lock"), proc_locks=str(tmp_path / "no-proc-locks"))
    assert probe.held and probe.how == "flock-probe" and probe.holder == proc.pid
    with pytest.raises(StateLocked):
        lock_state_dir(str(state_dir))

    assert proc.stdin is not None
    proc.stdin.close()  # the holder exits, its lock goes with it
    proc.wait(timeout=10)
    free = of(doctor.diagnose(config(tmp_path, state_dir=str(state_dir))), "state")[-1]
    assert free.message == f"free: no ccotel runs on this state dir (last held by pid {proc.pid})"
    assert not probe_lock(str(state_dir / "ccotel.lock"), proc_locks=str(tmp_path / "none")).held
    lock_state_dir(str(state_dir)).release()  # and it can be taken: nothing of doctor's holds it


# -- trace backend -------------------------------------------------------------------------------


def traces(tmp_path: Path, env: Mapping[str, str]) -> list[Finding]:
    return of(doctor.diagnose(config(tmp_path, env=env, traces_exporter="otlp")), "traces")


def test_otlp_receiver_reachable(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        found = traces(tmp_path, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint})
        assert len(receiver.requests) == 1 and receiver.spans == []  # one empty export, no span
    (f,) = found
    assert f.level is Level.OK and f.subject == f"{receiver.endpoint} (http/protobuf)"
    assert "accepted an empty export" in f.message


def test_otlp_closed_port(tmp_path: Path) -> None:
    port = free_port()
    (f,) = traces(tmp_path, {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"})
    assert f.level is Level.FAIL and f.subject == f"http://127.0.0.1:{port}/v1/traces (http/protobuf)"
    assert f"nothing accepts connections on 127.0.0.1:{port}" in f.message
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in f.fix and "--traces-exporter none" in f.fix


def test_otlp_receiver_refusing(tmp_path: Path) -> None:
    with OtlpReceiver(refuse) as receiver:
        (f,) = traces(tmp_path, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint})
    assert f.level is Level.FAIL and "HTTP 503" in f.message


def test_otlp_wrong_path_and_credentials(tmp_path: Path) -> None:
    with OtlpReceiver() as r:  # it answers 404 off /v1/traces, as a collector does
        (f,) = traces(tmp_path, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": r.endpoint.replace("/v1/traces", "/traces")})
    assert f.level is Level.FAIL and "HTTP 404" in f.message and "/v1/traces" in f.fix
    with OtlpReceiver(lambda _r: HttpAnswer(status=401, body=b"no", content_type="text/plain")) as r:
        (f,) = traces(tmp_path, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": r.endpoint})
    assert f.level is Level.FAIL and "OTEL_EXPORTER_OTLP_HEADERS" in f.fix
    with OtlpReceiver(lambda _r: HttpAnswer(status=429, headers=(("Retry-After", "5"),))) as r:
        (f,) = traces(tmp_path, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": r.endpoint})
    assert f.level is Level.WARN and "HTTP 429" in f.message


def test_not_an_otlp_server(tmp_path: Path) -> None:
    """A plain HTTP server on the port: POST is not what it does (501)."""
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        (f,) = traces(tmp_path, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT":
                                 f"http://127.0.0.1:{server.server_address[1]}/v1/traces"})
    finally:
        server.shutdown()
        server.server_close()
    assert f.level is Level.FAIL and "HTTP 501" in f.message


def test_otlp_grpc(tmp_path: Path) -> None:
    with OtlpReceiver(protocol="grpc") as r:
        (ok,) = traces(tmp_path, {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": r.endpoint})
        assert len(r.requests) == 1 and r.requests[0].span_ids == ()
    assert ok.level is Level.OK and "(grpc)" in ok.subject
    with OtlpReceiver(lambda _r: GrpcAnswer(code=grpc.StatusCode.UNAUTHENTICATED, message="who are you"),
                      protocol="grpc") as r:
        (f,) = traces(tmp_path, {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": r.endpoint})
    assert f.level is Level.FAIL and "UNAUTHENTICATED" in f.message and "OTEL_EXPORTER_OTLP_HEADERS" in f.fix


def test_unsupported_protocol_is_warned(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        found = traces(tmp_path, {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
                                  "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint})
    warn, ok = found
    assert warn.level is Level.WARN and warn.subject == "OTEL_EXPORTER_OTLP_PROTOCOL=http/json"
    assert ok.level is Level.OK


# -- metrics port --------------------------------------------------------------------------------


def metrics(tmp_path: Path, addr: str, roots: tuple[Path, ...] = (), env: Mapping[str, str] | None = None,
            managed: Path | None = None, timeout_s: float = 2.0) -> list[Finding]:
    cfg = config(tmp_path, roots, env=env, metrics_addr=addr, managed=managed)
    return of(doctor.diagnose(dataclasses.replace(cfg, timeout_s=timeout_s)), "metrics")


def test_metrics_port_free(tmp_path: Path) -> None:
    port = free_port()
    (f,) = metrics(tmp_path, f"127.0.0.1:{port}")
    assert f.level is Level.OK and f.message.startswith("free")
    with socket.socket() as s:  # and it is: doctor released it
        s.bind(("127.0.0.1", port))


def test_metrics_port_served_by_ccotel(tmp_path: Path) -> None:
    server = serve(Metrics(), MetricsAddress("127.0.0.1", 0))
    try:
        (f,) = metrics(tmp_path, f"127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
    assert f.level is Level.OK and f.message == f"already served by a running ccotel {__version__}"


def test_metrics_port_taken_by_something_else(tmp_path: Path) -> None:
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        (f,) = metrics(tmp_path, f"127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
    assert f.level is Level.FAIL and "another HTTP server" in f.message and "--metrics-addr" in f.fix
    with socket.socket() as listener:  # a port that takes connections and says nothing
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        (f,) = metrics(tmp_path, f"127.0.0.1:{listener.getsockname()[1]}", timeout_s=0.5)
    assert f.level is Level.FAIL and "does not answer HTTP" in f.message


def test_metrics_non_loopback_bind_is_warned(tmp_path: Path) -> None:
    port = free_port()
    warn, free = metrics(tmp_path, f"0.0.0.0:{port}")
    assert warn.level is Level.WARN and "binds 0.0.0.0" in warn.message and f"127.0.0.1:{port}" in warn.fix
    assert free.level is Level.OK
    (bad,) = metrics(tmp_path, "127.0.0.1:http")
    assert bad.level is Level.FAIL and bad.message.startswith("not host:port") and "'127.0.0.1:http'" in bad.message


# -- Claude Code's own telemetry ----------------------------------------------------------------


def test_claude_code_prometheus_clash(tmp_path: Path) -> None:
    root = fixture_root(tmp_path / "claude", "s01_bash_tool")
    settings = root / "settings.json"
    settings.write_text(json.dumps({"env": {"CLAUDE_CODE_ENABLE_TELEMETRY": "1", "OTEL_METRICS_EXPORTER": "prometheus"},
                                    "model": "opus"}))
    found = metrics(tmp_path, "127.0.0.1:9464", (root,))
    clash = next(f for f in found if f.level is Level.FAIL and "Claude Code" in f.message)
    assert str(settings) in clash.message and "9477" in clash.fix
    telemetry = of(doctor.diagnose(config(tmp_path, (root,), metrics_addr="127.0.0.1:9477")), "telemetry")
    assert [f.level for f in telemetry] == [Level.OK, Level.OK]
    assert "port 9464" in telemetry[1].message
    assert not [f for f in metrics(tmp_path, f"127.0.0.1:{free_port()}", (root,)) if f.level is not Level.OK]


def test_managed_settings_port_and_local_settings(tmp_path: Path) -> None:
    root = fixture_root(tmp_path / "claude", "s01_bash_tool")
    (root / "settings.local.json").write_text(json.dumps({"env": {"OTEL_METRICS_EXPORTER": "otlp,prometheus"}}))
    managed = tmp_path / "managed-settings.json"
    port = free_port()
    managed.write_text(json.dumps({"env": {"CLAUDE_CODE_ENABLE_TELEMETRY": "true",
                                           "OTEL_EXPORTER_PROMETHEUS_PORT": str(port)}}))
    found = metrics(tmp_path, f"127.0.0.1:{port}", (root,), managed=managed)
    clash = next(f for f in found if f.level is Level.FAIL)
    assert f"port {port}" in clash.message and str(root / "settings.local.json") in clash.message
    # 9464 with Claude Code's exporter off: a warning that it would clash once turned on
    warn = metrics(tmp_path, "127.0.0.1:9464")[0]
    assert warn.level is Level.WARN and "9464 is the port Claude Code's own Prometheus exporter" in warn.message


def test_traces_sent_twice(tmp_path: Path) -> None:
    """ccotel's backend from the environment, Claude Code's from its settings.json: the same one."""
    root = fixture_root(tmp_path / "claude", "s01_bash_tool")
    settings = root / "settings.json"
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}

    def telemetry(cc_endpoint: str) -> list[Finding]:
        settings.write_text(json.dumps({"env": {"CLAUDE_CODE_ENABLE_TELEMETRY": "1", "OTEL_TRACES_EXPORTER": "otlp",
                                                "OTEL_EXPORTER_OTLP_ENDPOINT": cc_endpoint}}))
        return of(doctor.diagnose(config(tmp_path, (root,), env=env, traces_exporter="otlp")), "telemetry")

    on, dup = telemetry("http://localhost:4318")
    assert on.level is Level.OK and str(settings) in on.message
    assert dup.level is Level.WARN and "twice" in dup.message and str(settings) in dup.message
    assert "service.name" in dup.fix and dup.data == {"claude_code": "http://localhost:4318/v1/traces"}
    assert [f.level for f in telemetry("http://localhost:14318")] == [Level.OK]


def test_telemetry_off_and_bad_settings(tmp_path: Path) -> None:
    root = fixture_root(tmp_path / "claude", "s01_bash_tool")
    (f,) = of(doctor.diagnose(config(tmp_path, (root,))), "telemetry")
    assert f.level is Level.OK and "off" in f.message
    (root / "settings.json").write_text("{not json")
    found = of(doctor.diagnose(config(tmp_path, (root,))), "telemetry")
    assert found[0].level is Level.WARN and found[0].subject == str(root / "settings.json")


# -- the command ---------------------------------------------------------------------------------


def test_run_json_and_text(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                           monkeypatch: pytest.MonkeyPatch) -> None:
    root = fixture_root(tmp_path / "claude", "s01_bash_tool")
    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
                 "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "CLAUDE_CODE_ENABLE_TELEMETRY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    args = doctor_parser().parse_args(["--root", str(root), "--state-dir", str(tmp_path / "state"), "--json",
                                       "--metrics-addr", f"127.0.0.1:{free_port()}"])
    assert doctor.run(args) == 1  # the closed trace port
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "fail" and doc["exit_status"] == 1
    assert [f["check"] for f in doc["findings"]] == ["roots", "versions", "format", "state", "traces", "metrics",
                                                     "telemetry"]
    assert [f["level"] for f in doc["findings"] if f["check"] == "traces"] == ["fail"]

    args = doctor_parser().parse_args(["--root", str(root), "--state-dir", str(tmp_path / "state"),
                                       "--traces-exporter", "none", "--metrics-addr", "none"])
    assert doctor.run(args) == 0
    text = capsys.readouterr().out
    assert "1 session and 0 subagent transcripts readable" in " ".join(text.split())  # the table may fold it
    assert text.rstrip().endswith("nothing failed")


def test_render_text_names_the_fix() -> None:
    out = io.StringIO()
    render_text([Finding("traces", Level.FAIL, "http://x:1/v1/traces", "down", "start it"),
                 Finding("state", Level.WARN, "/s", "mode 0755", "chmod 700 /s")], out)
    text = out.getvalue()
    assert "FAIL" in text and "→ start it" in text and "→ chmod 700 /s" in text
    assert "1 failed, 1 warnings\ntraces failed: " in text  # the verdict, then what the failure costs


def test_doctor_reads_only_tails(tmp_path: Path, realdata_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """120 real transcripts (80 MB): doctor reads a small part of them, from their ends."""
    size = sum(p.stat().st_size for p in realdata_root.rglob("*.jsonl"))
    read = []
    pread = os.pread

    def counting(fd: int, n: int, offset: int) -> bytes:
        data = pread(fd, n, offset)
        read.append(len(data))
        return data

    monkeypatch.setattr(os, "pread", counting)
    doctor.diagnose(config(tmp_path, (realdata_root,)))
    assert size > 50e6 and len(read) >= 120
    assert sum(read) < size * 0.1, (sum(read), size)


def test_doctor_reports_on_the_state_the_other_commands_use(tmp_path: Path) -> None:
    """--state, then --state-dir, then $CCOTEL_STATE, then the default (state.resolve_state)."""
    from ccotel.cli import build_parser

    env = {"XDG_STATE_HOME": str(tmp_path / "xdg"), "CCOTEL_STATE": str(tmp_path / "from-env")}

    def cfg_of(*argv: str, environ: Mapping[str, str] = env) -> DoctorConfig:
        args = build_parser("doctor").parse_args(["doctor", "--root", str(tmp_path), *argv])
        return doctor.config_from_args(args, environ)

    assert cfg_of("--state", str(tmp_path / "given")).state_dir == str(tmp_path / "given")
    assert cfg_of("--state-dir", str(tmp_path / "alias")).state_dir == str(tmp_path / "alias")
    assert cfg_of().state_dir == str(tmp_path / "from-env")
    assert cfg_of(environ={"XDG_STATE_HOME": str(tmp_path / "xdg")}).state_dir == str(tmp_path / "xdg" / "ccotel")
    assert cfg_of("--state", "none").state_dir is None
    (tmp_path / "given").mkdir(mode=0o700)
    state = doctor_state_findings(cfg_of("--state", str(tmp_path / "given")))
    assert state[0].subject == str(tmp_path / "given")
    # a PostgreSQL state is not a dir to look for; its password is never shown
    url = f"postgresql://u:Pw-leak@127.0.0.1:{free_port()}/db"
    for cfg in (cfg_of("--state", url), cfg_of(environ={**env, "CCOTEL_STATE": url})):
        found = doctor_state_findings(cfg)
        assert [f.level for f in found] == [Level.FAIL]
        assert found[0].subject == "postgresql://u@127.0.0.1:" + url.rsplit(":", 1)[1]
        assert "leak" not in json.dumps([f.as_dict() for f in found])


def doctor_state_findings(cfg: DoctorConfig) -> list[Finding]:
    from ccotel.commands.doctor.state import check_state

    return check_state(cfg)


def test_each_failure_says_what_it_costs() -> None:
    """Issue 28: doctor exits 1 when no backend runs, also for someone who only wants reports. The
    status stays (scripts rely on it); the verdict says what each failed check costs."""
    from ccotel.commands.doctor.finding import Finding
    from ccotel.commands.doctor.render import COSTS, render_text

    out = io.StringIO()
    render_text([Finding("traces", Level.FAIL, "http://localhost:4318/v1/traces", "nothing accepts connections"),
                 Finding("roots", Level.OK, "/r", "readable")], out)
    text = " ".join(out.getvalue().split())
    assert "1 failed traces failed: ccotel run, backfill and relay cannot deliver spans" in text
    assert "report, sessions, trace and check need no backend" in text
    assert set(COSTS) >= {"roots", "state", "traces", "metrics", "telemetry"}
