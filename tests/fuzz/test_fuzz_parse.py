"""The fuzz target (tests/fuzz/fuzz_parse.py): transcript bytes through parse -> assemble -> spans ->
OTLP encoding must never raise.

- under atheris (coverage-guided libFuzzer) in a subprocess for a bounded time, seeded;
- as seeded random mutations of valid transcripts and as random bytes under hypothesis, which
  need nothing but the test dependencies.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.fuzz import fuzz_parse

FUZZ = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_parse.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEEDS = fuzz_parse.seeds()
SETTINGS = dict(deadline=None, derandomize=True, database=None, phases=[Phase.explicit, Phase.generate],
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def test_fuzz_target_runs_clean_for_20_seconds(tmp_path):
    """libFuzzer through atheris when it is installed (it is in the test extra; a wheel exists for
    CPython 3.11 on x86-64 Linux); otherwise the target's own seeded mutation loop, same budget."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i, seed in enumerate(SEEDS):
        (corpus / f"seed-{i}").write_bytes(seed)
    if importlib.util.find_spec("atheris") is not None:
        cmd = [sys.executable, FUZZ, "-max_total_time=20", "-seed=1", "-max_len=16384", "-timeout=30",
               "-rss_limit_mb=4096", f"-artifact_prefix={tmp_path}/", "-print_final_stats=1", str(corpus)]
    else:
        cmd = [sys.executable, FUZZ, "--plain", "--seconds", "20", "--seed", "1", "--artifacts", str(tmp_path)]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    out = "\n".join(ln for ln in (r.stdout + r.stderr).splitlines()
                    if not ln.startswith(("INFO: Instrumenting", "#")))  # progress lines: noise here
    crashes = [p.name for p in tmp_path.iterdir() if p.name.startswith(("crash-", "timeout-", "oom-"))]
    assert r.returncode == 0 and not crashes, f"exit {r.returncode}, {crashes}:\n{out[-4000:]}"


@settings(max_examples=400, **SETTINGS)
@given(seed=st.integers(0, len(SEEDS) - 1), rng=st.randoms(use_true_random=False))
def test_fuzz_target_on_mutated_transcripts(seed, rng):
    fuzz_parse.one_input(fuzz_parse.mutate(rng, SEEDS[seed], SEEDS))


@settings(max_examples=300, **SETTINGS)
@given(data=st.binary(max_size=3000))
def test_fuzz_target_on_random_bytes(data):
    fuzz_parse.one_input(data)
