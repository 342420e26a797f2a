"""genai-prices' answers kept on disk per (model, UTC day): the prices read back are exactly the
ones looked up, a process with a warm cache does not import genai-prices, and a broken or
unwritable cache only costs a lookup."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ccotel.records import Usage
from ccotel.spans.pricing import PriceCache, Pricing, _from_genai_prices, default_cache_path
from tests.spans.test_pricing import AT_NS, MODELS

DAY = 86_400 * 10**9
DAYS = [AT_NS - 400 * DAY, AT_NS - 90 * DAY, AT_NS, AT_NS + 3 * DAY + 5]
UNKNOWN = ["glm-4.7", "qwen3-coder:30b"]


def test_prices_read_back_equal_the_lookups(tmp_path):
    path = str(tmp_path / "prices.json")
    warm = Pricing(cache_path=path)
    for model in MODELS + UNKNOWN:
        for at in DAYS:
            warm.price(model, at)
    cold = Pricing(cache_path=path)  # a new process: everything from the file
    for model in MODELS + UNKNOWN:
        for at in DAYS:
            assert cold.price(model, at) == _from_genai_prices(model, at), (model, at)
    assert len((tmp_path / "prices.json").read_text().splitlines()) == len(MODELS + UNKNOWN) * len(DAYS)


def test_a_warm_cache_does_not_import_genai_prices(tmp_path):
    path = str(tmp_path / "prices.json")
    Pricing(cache_path=path).cost("claude-opus-4-6", Usage(10, 20, 30, 40, 15, 25), AT_NS)
    code = ("import sys\nfrom ccotel.spans.pricing import Pricing\nfrom ccotel.records import Usage\n"
            f"c = Pricing(cache_path={path!r}).cost('claude-opus-4-6', Usage(10, 20, 30, 40, 15, 25), {AT_NS})\n"
            "print(repr(c), 'genai_prices' in sys.modules, 'pydantic' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    fresh = Pricing(cache_path="").cost("claude-opus-4-6", Usage(10, 20, 30, 40, 15, 25), AT_NS)
    assert out == [repr(fresh), "False", "False"]


def test_a_model_and_day_not_in_the_cache_is_looked_up(tmp_path):
    path = tmp_path / "prices.json"
    Pricing(cache_path=str(path)).price("claude-opus-4-6", AT_NS)
    p = Pricing(cache_path=str(path))
    assert p.price("claude-sonnet-4-5-20250929", AT_NS) == _from_genai_prices("claude-sonnet-4-5-20250929", AT_NS)
    assert p.price("claude-opus-4-6", AT_NS + 2 * DAY) == _from_genai_prices("claude-opus-4-6", AT_NS + 2 * DAY)
    assert len(path.read_text().splitlines()) == 3


def test_two_writers_keep_both_their_prices(tmp_path):
    """Processes pricing at once (backfill workers) append: neither loses the other's lines."""
    path = str(tmp_path / "prices.json")
    a, b = Pricing(cache_path=path), Pricing(cache_path=path)
    a.price("claude-opus-4-6", AT_NS)  # both read the file before either wrote
    b.price("claude-opus-4-6", AT_NS)
    a.price("claude-sonnet-4-5-20250929", AT_NS)
    b.price("claude-haiku-4-5-20251001", AT_NS)
    entries = PriceCache(path)
    for model in ("claude-opus-4-6", "claude-sonnet-4-5-20250929", "claude-haiku-4-5-20251001"):
        assert entries.get(model, AT_NS // DAY) == (True, _from_genai_prices(model, AT_NS))


@pytest.mark.parametrize("content", ["not json", "[1]", "5", '[%d, "claude-opus-4-6", [1, 2]]',
                                     '[%d, "claude-opus-4-6", [[1, []], [2, []]]]'])
def test_a_broken_cache_is_looked_up_again(tmp_path, content):
    path = tmp_path / "prices.json"
    path.write_text(content.replace("%d", str(AT_NS // DAY)))
    assert Pricing(cache_path=str(path)).price("claude-opus-4-6", AT_NS) == _from_genai_prices("claude-opus-4-6", AT_NS)


def test_an_unwritable_cache_dir_still_prices(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    p = Pricing(cache_path=str(blocker / "ccotel" / "prices.json"))  # its dir cannot be made
    assert p.price("claude-opus-4-6", AT_NS) == _from_genai_prices("claude-opus-4-6", AT_NS)


def test_a_call_without_a_time_is_not_kept(tmp_path):
    path = tmp_path / "prices.json"
    Pricing(cache_path=str(path)).price("claude-opus-4-6", None)
    assert not path.exists()


def test_the_cache_is_named_by_the_installed_table(tmp_path):
    a = default_cache_path({"XDG_CACHE_HOME": str(tmp_path)})
    assert a is not None and a.startswith(str(tmp_path / "ccotel" / "prices-"))
    assert default_cache_path({"XDG_CACHE_HOME": str(tmp_path), "HOME": "/elsewhere"}) == a


def test_the_cache_read_holds_each_line_as_its_bytes_until_asked(tmp_path):
    """Every process reads the whole cache (a line per model and day ever priced): each price is
    decoded when its model and day is asked, not all of them at the start (~700 bytes each)."""
    import tracemalloc

    path = tmp_path / "prices.jsonl"
    price = '[[5.0, []], [25.0, []], [6.25, []], [10.0, []], [0.5, []]]'
    path.write_text("".join(f'[{20000 + i}, "claude-opus-4-{i % 9}", {price}]\n' for i in range(2000)))
    cache = PriceCache(str(path))
    tracemalloc.start()
    try:
        assert cache.get("claude-opus-4-1", 20001)[0] is True
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held / 2000 < 400, held / 2000
    assert cache.get("claude-opus-4-1", 20001) == PriceCache(str(path)).get("claude-opus-4-1", 20001)
    assert cache.get("claude-opus-4-1", 20002) == (False, None)
