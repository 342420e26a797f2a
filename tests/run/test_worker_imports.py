"""What a catch-up worker imports: every module it loads is held in each worker's memory (and in
ccotel run's), so none that plain-http export and the read do not use."""

from __future__ import annotations

import hashlib
import subprocess
import sys

from ccotel.hashing import blake2b, sha256


def test_the_run_modules_import_neither_openssl_nor_http_client_nor_email() -> None:
    unused = ("hashlib", "_hashlib", "ssl", "http.client", "email.utils")
    code = ("import sys, ccotel.run.runner, ccotel.run.catchup, ccotel.commands.run; "
            f"print(sorted(m for m in {unused!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_digests_are_hashlibs() -> None:
    for data in (b"", b"abc", "é\x1f".encode() * 1000):
        assert blake2b(data, digest_size=8).hexdigest() == hashlib.blake2b(data, digest_size=8).hexdigest()
        assert blake2b(data, digest_size=16).digest() == hashlib.blake2b(data, digest_size=16).digest()
        assert sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()


_NOTE_IMPORTS = '''
import atexit, os, sys

def _note():
    import multiprocessing
    name = multiprocessing.current_process().name
    with open(os.path.join(os.environ["CCOTEL_TEST_NOTES"], f"{name}-{os.getpid()}"), "w") as f:
        f.write(" ".join(sorted(m for m in sys.modules if m.split(".")[0] == "genai_prices")))

atexit.register(_note)
'''


def test_catch_up_workers_never_import_genai_prices_even_with_a_cold_price_cache(tmp_path, monkeypatch):
    """A first start (no price cache yet): the workers' prices come from ccotel run, which looks
    them up once; each worker importing genai-prices (and pydantic) held ~20 MB more apiece. The
    spans, their costs included, are those of one process that priced them itself."""
    import os
    import shutil

    from bench.corpus import generate
    from tests.harness.fixtures import list_fixtures, load_fixture
    from tests.run.test_catchup import catch_up, spans_by_id
    from tests.support.otlp import OtlpReceiver

    root = tmp_path / "claude"
    generate(str(root), 1_500_000, seed=7, session_mean=150_000, projects=3)
    for name in list_fixtures():
        shutil.copytree(load_fixture(name).config_dir / "projects", root / "projects", dirs_exist_ok=True)
    hooks, notes = tmp_path / "site", tmp_path / "notes"
    hooks.mkdir()
    notes.mkdir()
    (hooks / "sitecustomize.py").write_text(_NOTE_IMPORTS)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(hooks), *sys.path]))
    monkeypatch.setenv("CCOTEL_TEST_NOTES", str(notes))
    spans = []
    for n, workers in enumerate((2, 1)):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / f"cold-cache-{n}"))  # empty: nothing priced yet
        with OtlpReceiver() as rx:
            _, processes, failed = catch_up(root, tmp_path / f"state-{n}", rx.endpoint, workers, monkeypatch)
            spans.append(spans_by_id(rx))
        assert (processes, failed) == ((2, 0) if workers == 2 else (1, 0))
    assert spans[0] == spans[1]
    assert any("claude_code.cost.usd" in str(s) for s in spans[0].values())
    seen = {p.name: p.read_text() for p in notes.iterdir() if p.name.startswith("ccotel-catchup")}
    assert len(seen) >= 2
    assert all(imported == "" for imported in seen.values()), seen
