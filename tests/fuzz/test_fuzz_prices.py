"""``--prices FILE`` as an input surface (options.price_file, pricing.load_overrides): any bytes and
any JSON either load as prices or are refused with a clear message (argparse's usage error, exit 2),
never another exception; good files load with the prices they say. The crashes these found are
kept as explicit examples."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from ccotel.commands.options import price_file
from ccotel.spans.pricing import MAX_PRICE, Price

SETTINGS: dict[str, Any] = dict(deadline=None, derandomize=True, database=None, max_examples=300,
                                phases=[Phase.explicit, Phase.generate],
                                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                       HealthCheck.function_scoped_fixture])
ROOT = Path(__file__).resolve().parents[2]

# Each of these crashed price_file with something other than a usage error (a traceback at start).
DEEP = b"[" * 100_000 + b"]" * 100_000  # RecursionError in json
HUGE_INT = b'{"m": {"input": 1' + b"0" * 400 + b', "output": 1}}'  # OverflowError in math.isfinite
DEEP_PRICE = b'{"m": {"input": ' + b"[" * 50_000 + b"]" * 50_000 + b', "output": 1}}'


def _load(tmp: Path, data: bytes) -> dict[str, Price] | str:
    """The prices, or the usage error's message; anything else raised fails the test."""
    path = tmp / "prices.json"
    path.write_bytes(data)
    try:
        return price_file(str(path))
    except argparse.ArgumentTypeError as exc:
        message = str(exc)
        assert message.startswith(f"--prices {path}: ") and "\n" not in message
        return message


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20)
_price_value = (st.integers(-10, 10**30) | st.floats() | st.booleans() | st.none() | st.text(max_size=5)
                | st.lists(st.integers(), max_size=2))
_price_entry = st.dictionaries(st.sampled_from(["input", "output", "cache_read", "cache_write_5m", "cache_write_1h",
                                                "other"]), _price_value, max_size=6)


@settings(**SETTINGS)
@given(data=st.binary(max_size=2000))
@example(data=DEEP)
@example(data=HUGE_INT)
@example(data=DEEP_PRICE)
@example(data=b"\xff\xfe{}")
@example(data=b'{"m": {"input": NaN, "output": 1}}')
@example(data=b'{"m": {"input": 1e999, "output": 1}}')
def test_any_bytes_load_or_are_a_usage_error(tmp_path: Path, data: bytes) -> None:
    _load(tmp_path, data)


@settings(**SETTINGS)
@given(doc=_json | st.dictionaries(st.text(max_size=30), _price_entry | _json, max_size=5))
def test_any_json_loads_or_is_a_usage_error(tmp_path: Path, doc: Any) -> None:
    got = _load(tmp_path, json.dumps(doc).encode())
    if isinstance(got, dict):
        assert isinstance(doc, dict) and set(got) == {str(k) for k in doc}


_good_price = st.floats(0, MAX_PRICE, allow_nan=False) | st.integers(0, int(MAX_PRICE))


@settings(**SETTINGS)
@given(table=st.dictionaries(
    st.text(min_size=1, max_size=40),
    st.fixed_dictionaries({"input": _good_price, "output": _good_price},
                          optional={"cache_read": _good_price, "cache_write_5m": _good_price,
                                    "cache_write_1h": _good_price}),
    max_size=6))
def test_good_files_load_with_their_prices(tmp_path: Path, table: dict[str, dict[str, float]]) -> None:
    got = _load(tmp_path, json.dumps(table).encode())
    assert isinstance(got, dict), got
    assert set(got) == set(table)
    for model, prices in table.items():
        p = got[model]
        assert (p.input.base, p.output.base) == (float(prices["input"]), float(prices["output"]))
        for key in ("cache_read", "cache_write_5m", "cache_write_1h"):
            if key in prices:
                assert getattr(p, key).base == float(prices[key])


@pytest.mark.parametrize("data", [DEEP, HUGE_INT, DEEP_PRICE], ids=["deep", "huge_int", "deep_price"])
def test_a_bad_prices_file_is_exit_2_with_a_message(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "prices.json"
    path.write_bytes(data)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CCOTEL_"))}
    env["XDG_STATE_HOME"] = str(tmp_path / "xdg")
    done = subprocess.run([sys.executable, "-m", "ccotel", "report", "--root", str(tmp_path / "none"), "--prices",
                           str(path), "--json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert f"--prices {path}:" in done.stderr and "Traceback" not in done.stderr
