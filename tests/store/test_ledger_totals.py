"""The ledger's call_totals, kept by SQLite triggers as calls are inserted, upserted and deleted:
always equal to a fresh GROUP BY of the calls (so a report read from them is the row-by-row
report), a call upserted again never counted twice, a schema-1 ledger filled once on opening;
costs as integer nano-dollars, the same in Python (nano_usd) as in SQLite."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccotel.store import ledger_schema as ledger_mod
from ccotel.store.ledger import LEDGER_FILE, SCHEMA_VERSION, UPSERT_CALL_SET, Ledger, nano_usd

SLOT = ledger_mod.SLOT_NS
FRESH = (ledger_mod.FILL_TOTALS.replace("INSERT INTO call_totals ", "")  # the one GROUP BY
         + " ORDER BY 1, 2, 3, 4")


def totals(ledger: Ledger) -> list[tuple[object, ...]]:
    return ledger.db.execute("SELECT * FROM call_totals ORDER BY 1, 2, 3, 4").fetchall()


def fresh(ledger: Ledger) -> list[tuple[object, ...]]:
    return ledger.db.execute(FRESH).fetchall()


def call(key: str, sid: str = "s", t: int = 0, model: str | None = "m", failed: int = 0, output: int = 1,
         cost: float | None = 0.5) -> tuple[object, ...]:
    return (key, sid, t, t, "/w", "-w", model, None, failed, 10, output, 2, 3, 1, 2, 0, cost, int(cost is not None),
            None)


def test_insert_upsert_and_delete_keep_the_totals(tmp_path: Path) -> None:
    ledger = Ledger(str(tmp_path / LEDGER_FILE))
    ledger._write(([call("a", t=5), call("b", t=7, cost=None), call("c", t=SLOT + 1, model=None)], [], [], []))  # noqa: SLF001
    assert totals(ledger) == fresh(ledger)
    # model, slot, calls, priced, cost, first, last
    assert [(r[1], r[3], r[4], r[12], r[13], r[14], r[15]) for r in totals(ledger)] == \
        [("", 1, 1, 1, 500_000_000, SLOT + 1, SLOT + 1), ("m", 0, 2, 1, 500_000_000, 5, 7)]
    before = totals(ledger)
    ledger._write(([call("a", t=5)], [], [], []))  # noqa: SLF001 - the same snapshot again: no change
    assert totals(ledger) == before
    ledger._write(([call("a", t=6, output=2, cost=0.75)], [], [], []))  # noqa: SLF001 - a later snapshot
    assert totals(ledger) == fresh(ledger)
    row = next(r for r in totals(ledger) if r[3] == 0)
    assert (row[4], row[13], row[14], row[15]) == (2, 750_000_000, 6, 7)  # counted once; first time moved
    ledger._write(([call("b", t=2 * SLOT, output=5, failed=1)], [], [], []))  # noqa: SLF001 - another slot, failed
    assert totals(ledger) == fresh(ledger)
    ledger.db.execute("DELETE FROM calls WHERE key = 'a'")
    assert totals(ledger) == fresh(ledger)
    ledger.db.execute("DELETE FROM calls")
    assert totals(ledger) == [] == fresh(ledger)


@pytest.mark.parametrize("seed", range(30))
def test_totals_equal_a_fresh_group_by_after_random_writes(tmp_path: Path, seed: int) -> None:
    """Inserts, upserts (later and earlier snapshots, moved times, changed models), deletes and
    updates of any column, in random order: the totals are those of the calls left."""
    rnd = random.Random(seed)
    ledger = Ledger(str(tmp_path / LEDGER_FILE))
    times = [0, -1, -SLOT, SLOT - 1, SLOT, 3 * SLOT + 7, *(rnd.randrange(-5 * SLOT, 5 * SLOT) for _ in range(6))]
    for _ in range(40):
        batch = [call(f"k{rnd.randrange(25)}", rnd.choice(["s1", "s2"]), rnd.choice(times),
                      rnd.choice([None, "m", "n"]), int(rnd.random() < 0.2), rnd.randrange(5),
                      rnd.choice([None, 0.1, 0.2, 1e-9, 3.3333333333]))
                 for _ in range(rnd.randrange(1, 6))]
        ledger._write((batch, [], [], []))  # noqa: SLF001
        action = rnd.random()
        if action < 0.15:
            ledger.db.execute("DELETE FROM calls WHERE key = ?", (f"k{rnd.randrange(25)}",))
        elif action < 0.3:
            ledger.db.execute("UPDATE calls SET time_ns = ?, model = ?, api_error = ? WHERE key = ?",
                              (rnd.choice(times), rnd.choice([None, "m"]), rnd.randrange(2), f"k{rnd.randrange(25)}"))
        assert totals(ledger) == fresh(ledger)


TOOLS_FRESH = ledger_mod.FILL_TOOL_TOTALS.replace("INSERT INTO tool_totals ", "") + " ORDER BY 1, 2"


def tool_totals(ledger: Ledger) -> list[tuple[object, ...]]:
    return ledger.db.execute("SELECT * FROM tool_totals ORDER BY 1, 2").fetchall()


@pytest.mark.parametrize("seed", range(20))
def test_tool_totals_equal_a_fresh_group_by_after_random_writes(tmp_path: Path, seed: int) -> None:
    """Tool calls recorded again (a later view: moved, failed, orphaned, repaired) and deleted:
    the totals the report reads are those of the tool rows left, each counted once."""
    rnd = random.Random(seed)
    ledger = Ledger(str(tmp_path / LEDGER_FILE))
    times = [0, -1, -SLOT, SLOT - 1, SLOT, *(rnd.randrange(-3 * SLOT, 3 * SLOT) for _ in range(4))]
    for _ in range(30):
        batch = [(rnd.choice(["s1", "s2"]), f"t{rnd.randrange(15)}", rnd.choice(times), 0, "Bash", None,
                  rnd.choice([None, "orphaned", "Error"]), rnd.randrange(2)) for _ in range(rnd.randrange(1, 5))]
        ledger._write(([], batch, [], []))  # noqa: SLF001
        if rnd.random() < 0.2:
            ledger.db.execute("DELETE FROM tools WHERE tool_use_id = ?", (f"t{rnd.randrange(15)}",))
        assert tool_totals(ledger) == ledger.db.execute(TOOLS_FRESH).fetchall()
    rows = ledger.db.execute("SELECT count(*) FROM tools").fetchone()[0]
    assert sum(r[2] for r in tool_totals(ledger)) == rows  # type: ignore[misc]


def test_a_schema_1_ledger_gets_its_totals_once(tmp_path: Path) -> None:
    path = tmp_path / LEDGER_FILE
    db = sqlite3.connect(path)
    db.executescript(ledger_mod.SCHEMA_V1)  # a ledger written before the totals
    upsert = ("INSERT INTO calls VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (key) DO UPDATE SET "
              "time_ns = max(calls.time_ns, excluded.time_ns)," + UPSERT_CALL_SET)
    db.executemany(upsert, [call("a", t=5), call("b", t=SLOT, model=None), call("a", t=9, output=3)])
    db.executemany("INSERT OR REPLACE INTO tools VALUES (?,?,?,?,?,?,?,?)",
                   [("s", "t1", 5, 0, "Bash", None, None, 0), ("s", "t2", SLOT, 0, "Bash", None, "orphaned", 0)])
    db.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    db.commit()
    db.close()
    ledger = Ledger(str(path))
    assert ledger._meta("schema_version") == str(SCHEMA_VERSION)  # noqa: SLF001
    assert totals(ledger) == fresh(ledger) and len(totals(ledger)) == 2
    assert tool_totals(ledger) == [("s", 0, 1, 0, 0), ("s", 1, 1, 1, 1)]
    ledger._write(([call("c", t=6)], [], [], []))  # noqa: SLF001 - the triggers are there
    assert totals(ledger) == fresh(ledger)
    ledger.close()
    again = Ledger(str(path))  # opened again: not filled twice
    assert totals(again) == fresh(again)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.floats(min_value=0.0, max_value=1e6), st.floats(min_value=-1e6, max_value=0.0),
                 st.integers(0, 10**15).map(lambda n: n / 1e9),
                 st.integers(0, 10**6).map(lambda n: n / 1e9 + 5e-10)))  # half-way cases
def test_nano_usd_is_sqlites_rounding(cost: float) -> None:
    db = sqlite3.connect(":memory:")
    assert db.execute("SELECT CAST(round(? * 1e9) AS INTEGER)", (cost,)).fetchone()[0] == nano_usd(cost)


def test_nano_usd_of_a_cost_rounded_to_9_decimals_is_exact() -> None:
    assert nano_usd(0.038376250) == 38_376_250
    assert nano_usd(round(0.1 + 0.2, 9)) == 300_000_000
    assert nano_usd(2.5e-9) == 3 and nano_usd(-2.5e-9) == -3  # half away from zero, as SQLite


def test_a_fill_keeps_no_totals_until_its_end_then_exact_ones(tmp_path: Path) -> None:
    """While the ledger is filled (a first catch-up, a rebuild: reports then read the transcripts,
    never the totals), its writes keep no totals row by row; the fill's end makes them from the
    calls and tools, and the triggers keep them from then on. A fill stopped midway (the process
    killed) and the ledger opened again: its end still makes exact totals."""
    path = str(tmp_path / LEDGER_FILE)
    ledger = Ledger(path)
    ledger._write(([call("old", t=3)], [("s", "t0", 3, 0, "Bash", None, None, 0)], [], []))  # noqa: SLF001
    ledger.filling("rebuild")
    ledger._write(([call("a", t=5), call("b", t=SLOT, model=None)],  # noqa: SLF001
                   [("s", "t1", 5, 0, "Bash", None, "Error", 0)], [], []))
    ledger._write(([call("a", t=9, output=3)], [], [], []))  # noqa: SLF001 - a later snapshot
    assert len(totals(ledger)) == 1 and totals(ledger)[0][4] == 1  # only the call written before the fill
    ledger.close()
    ledger = Ledger(path)  # a fill stopped: opened again, still filling
    assert ledger.still_filling() == "rebuild"
    ledger._write(([call("c", t=2 * SLOT, failed=1)], [], [], []))  # noqa: SLF001
    ledger.filling(None)
    assert totals(ledger) == fresh(ledger) and sum(r[4] for r in totals(ledger)) == 4  # type: ignore[misc]
    assert tool_totals(ledger) == ledger.db.execute(TOOLS_FRESH).fetchall() == [("s", 0, 2, 1, 0)]
    ledger._write(([call("d", t=7)], [("s", "t2", SLOT, 0, "Bash", None, None, 1)], [], []))  # noqa: SLF001
    assert totals(ledger) == fresh(ledger)  # kept by the triggers again
    assert tool_totals(ledger) == ledger.db.execute(TOOLS_FRESH).fetchall()
    ledger.filling(None)  # an end said twice (two writers): the same totals
    assert totals(ledger) == fresh(ledger)
