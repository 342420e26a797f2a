"""Spans: what the assembler finished -> SpanRecords (attributes, ids, cost, opt-in content)."""
