"""Prices: genai-prices decides which price applies, ccotel does the arithmetic on floats.

The float arithmetic must equal genai-prices' own (Decimal) calculation, tiers and 1-hour cache
writes included; a model without a price is None (flagged), never $0; a --prices file wins.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone

import pytest
from genai_prices import Usage as GUsage
from genai_prices import calc_price
from hypothesis import given, settings
from hypothesis import strategies as st

from ccotel.records import Usage
from ccotel.spans.pricing import Price, PriceFileError, Pricing, Rate, load_overrides

MODELS = ["claude-opus-5", "claude-sonnet-5", "claude-fable-5", "claude-opus-5-5", "claude-opus-4-6",
          "claude-opus-4-8", "claude-haiku-4-5-20251001", "claude-sonnet-4-5-20250929",
          "claude-sonnet-4-20250514", "claude-3-5-haiku-20241022"]
AT = datetime(2026, 9, 1, tzinfo=timezone.utc)
AT_NS = int(AT.timestamp() * 1e9)


def reference(model: str, u: Usage) -> float:
    split = u.cache_creation_5m + u.cache_creation_1h
    g = GUsage(input_tokens=u.total_input, output_tokens=u.output_tokens,
               cache_read_tokens=u.cache_read_input_tokens, cache_write_tokens=u.cache_creation_input_tokens,
               cache_write_1h_tokens=u.cache_creation_1h if split else 0)
    return float(calc_price(g, model, provider_id="anthropic", genai_request_timestamp=AT).total_price)


@settings(max_examples=300, deadline=None)
@given(model=st.sampled_from(MODELS), fresh=st.integers(0, 400_000), out=st.integers(0, 100_000),
       read=st.integers(0, 300_000), w5=st.integers(0, 100_000), w1=st.integers(0, 100_000))
def test_float_arithmetic_equals_genai_prices(model, fresh, out, read, w5, w1):
    u = Usage(fresh, out, read, w5 + w1, w5, w1)
    ours = Pricing().cost(model, u, AT_NS)
    assert ours == pytest.approx(reference(model, u), rel=1e-9, abs=1e-12)


def test_tier_crossing_is_priced_at_the_tier_rate():
    # sonnet-4-5 has a 200k-input tier: all tokens of a call past it cost the tier rate
    below, above = Usage(199_000, 0, 0, 0), Usage(201_000, 0, 0, 0)
    p = Pricing()
    assert p.cost("claude-sonnet-4-5-20250929", below, AT_NS) == pytest.approx(199_000 * 3 / 1e6)
    assert p.cost("claude-sonnet-4-5-20250929", above, AT_NS) == pytest.approx(201_000 * 6 / 1e6)


@pytest.mark.parametrize("model", ["claude-opus-5", "claude-sonnet-5", "claude-fable-5", "claude-opus-5-5"])
def test_new_models_have_a_price(model):
    cost = Pricing().cost(model, Usage(1000, 1000, 1000, 1000), AT_NS)
    assert cost is not None and cost > 0


@pytest.mark.parametrize("model", ["glm-4.7", "qwen3-coder:30b", "<synthetic>", "", None])
def test_unknown_models_are_unpriced_not_free(model):
    assert Pricing().cost(model, Usage(1000, 1000), AT_NS) is None


def test_a_prices_file_overrides(tmp_path):
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"glm-4": {"input": 1, "output": 2},
                                "claude-opus-5": {"input": 10, "output": 20, "cache_read": 1,
                                                  "cache_write_5m": 12, "cache_write_1h": 15}}))
    p = Pricing(load_overrides(str(path)))
    assert p.cost("glm-4.7", Usage(1_000_000, 1_000_000), AT_NS) == pytest.approx(3.0)
    assert p.cost("claude-opus-5", Usage(0, 0, 1_000_000, 2_000_000, 1_000_000, 1_000_000), AT_NS) \
        == pytest.approx(1 + 12 + 15)
    path.write_text("[1]")
    with pytest.raises(ValueError):
        load_overrides(str(path))


TIERED = "claude-sonnet-4-5-20250929"


@settings(max_examples=300, deadline=None)
@given(model=st.sampled_from(MODELS), fresh=st.integers(0, 400_000), out=st.integers(0, 100_000),
       read=st.integers(0, 300_000), w5=st.integers(0, 100_000), w1=st.integers(0, 100_000),
       split=st.booleans())
def test_cost_of_a_tuple_is_the_same_float(model, fresh, out, read, w5, w1, split):
    """The report prices usage tuples (and untiered prices by their base rates): the same float,
    bit for bit, as Price.cost of the Usage, tiered prices included."""
    u = Usage(fresh, out, read, w5 + w1, w5 if split else 0, w1 if split else 0)
    p = Pricing(cache_path="")
    assert p.cost_of(model, (u.input_tokens, u.output_tokens, u.cache_read_input_tokens,
                             u.cache_creation_input_tokens, u.cache_creation_5m, u.cache_creation_1h, 0), AT_NS) \
        == p.cost(model, u, AT_NS)
    price = p.price(model, AT_NS)
    assert price is not None
    total = u.total_input
    rates = (price.input, price.output, price.cache_write_5m, price.cache_write_1h, price.cache_read)
    w1_billed = u.cache_creation_1h if u.cache_creation_5m + u.cache_creation_1h else 0
    plain = (u.input_tokens * rates[0].at(total) + u.output_tokens * rates[1].at(total)
             + (u.cache_creation_input_tokens - w1_billed) * rates[2].at(total) + w1_billed * rates[3].at(total)
             + u.cache_read_input_tokens * rates[4].at(total)) / 1e6
    assert price.cost(u) == plain


def test_tiered_prices_take_the_tiered_path():
    price = Pricing(cache_path="").price(TIERED, AT_NS)
    assert price is not None and price._flat is None  # noqa: SLF001
    assert Pricing(cache_path="").price("claude-opus-4-6", AT_NS)._flat is not None  # noqa: SLF001


_rates = st.builds(Rate, st.floats(0, 100, allow_nan=False),
                   st.lists(st.tuples(st.integers(0, 500_000), st.floats(0, 100, allow_nan=False)), max_size=3)
                   .map(lambda ts: tuple(sorted(ts))))


@settings(max_examples=500, deadline=None)
@given(rates=st.tuples(_rates, _rates, _rates, _rates, _rates),
       counts=st.tuples(*(st.integers(0, 400_000) for _ in range(6))))
def test_a_call_below_every_tier_is_priced_as_rate_at_prices_it(rates, counts):
    """Price.cost_of takes the base rates without Rate.at when the call's whole input is not above
    any tier's threshold: the same float as the five lookups, on either side of the thresholds."""
    price = Price(*rates)
    fresh, out, read, write, w5, w1 = counts
    total = fresh + read + write
    w1_billed = w1 if w5 + w1 else 0
    plain = (fresh * rates[0].at(total) + out * rates[1].at(total) + (write - w1_billed) * rates[2].at(total)
             + w1_billed * rates[3].at(total) + read * rates[4].at(total)) / 1e6
    assert price.cost_of(fresh, out, read, write, w5, w1) == plain


# -- a --prices file is checked when it is loaded (issue 27) -----------------------------------


@pytest.mark.parametrize("text", [
    '{"m": {"input": 1e308, "output": 1}}',  # finite, but any cost of it overflows to inf
    '{"m": {"input": NaN, "output": 1}}',
    '{"m": {"input": 1, "output": Infinity}}',
    '{"m": {"input": 1, "output": -Infinity}}',
    '{"m": {"input": -1, "output": 1}}',
    '{"m": {"input": 1, "output": 1, "cache_read": -0.5}}',
    '{"m": {"input": 1, "output": 1, "cache_write_1h": 1e300}}',
    '{"m": {"input": 1, "output": 1, "cache_write_5m": "7"}}',
    '{"m": {"input": true, "output": 1}}',
])
def test_a_prices_file_with_a_price_no_cost_can_be_made_of_is_refused(tmp_path, text):
    path = tmp_path / "prices.json"
    path.write_text(text)
    with pytest.raises(PriceFileError) as refused:
        load_overrides(str(path))
    assert str(path) in str(refused.value)
    assert "'m'" in str(refused.value) or "NaN is not" in str(refused.value) or "Infinity is not" in str(refused.value)


def test_a_prices_file_that_is_no_small_regular_file_is_refused_without_reading_it(tmp_path):
    big = tmp_path / "big.json"
    big.write_text('{"m": {"input": 1, "output": 1}, "pad": "' + "x" * (2 << 20) + '"}')
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opened for reading, it would wait for a writer forever
    for path in ("/dev/zero", str(fifo), str(big), str(tmp_path)):
        with pytest.raises(PriceFileError) as refused:
            load_overrides(path)
        assert path in str(refused.value)
    zero = Pricing(load_overrides(_write(tmp_path, '{"m": {"input": 0, "output": 0}}')))
    assert zero.cost("m", Usage(10, 10), AT_NS) == 0.0  # free is a price


def _write(tmp_path, text):
    path = tmp_path / "ok.json"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("command", ["run", "backfill", "report", "trace", "sessions"])
@pytest.mark.parametrize("text", ['{"m": {"input": 1e308, "output": 1}}', '{"m": {"input": NaN, "output": 1}}',
                                  '{"m": {"input": -1, "output": 1}}', None])
def test_every_command_that_takes_prices_refuses_a_bad_file_before_any_work(tmp_path, command, text):
    root = tmp_path / "claude"
    (root / "projects").mkdir(parents=True)
    prices = "/dev/zero" if text is None else _write(tmp_path, text)
    extra = {"run": ["--metrics-addr", "none", "--traces-exporter", "none"], "backfill": ["--traces-exporter", "none"],
             "report": ["--json"], "trace": ["0123456789abcdef"], "sessions": []}[command]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "CCOTEL_"))}
    env["XDG_STATE_HOME"] = str(tmp_path / "xdg")
    done = subprocess.run([sys.executable, "-m", "ccotel", command, "--root", str(root), "--prices", prices, *extra],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert f"--prices {prices}" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "xdg").exists()  # refused before the state was made
