"""Which genai-prices table is installed, found without importing genai-prices (pydantic and the
table itself take tens of MB and most of a second): what a price cache or a kept report answer is
keyed by, since another table may price a call otherwise."""

from __future__ import annotations

import importlib.util
import os

__all__ = ["price_table_file", "price_table_key"]


def price_table_file() -> str | None:
    """The installed genai-prices' table (its data file); None: it is not installed. A new
    version is a new file (or a new size and mtime)."""
    try:
        spec = importlib.util.find_spec("genai_prices")
        locations = list(spec.submodule_search_locations or ()) if spec is not None else []
        if not locations:
            return None
        data = os.path.join(locations[0], "data.py")
        os.stat(data)
    except (ImportError, ValueError, OSError):
        return None
    return data


def price_table_key() -> list[str | int | None]:
    """[the table's file, its size, its mtime], or [None] when genai-prices is not installed."""
    data = price_table_file()
    try:
        st = os.stat(data) if data else None
    except OSError:
        st = None
    return [os.path.realpath(data), st.st_size, st.st_mtime_ns] if data and st else [None]
