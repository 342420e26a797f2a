"""The PostgreSQL state's schema (postgres.py): its versions, each a step from the one before."""

from __future__ import annotations

__all__ = ["MIGRATIONS", "SCHEMA_VERSION"]

# Schema versions, each a step from the one before (``meta.schema``); a new version appends one.
_V1 = """
CREATE TABLE ccotel.hosts (hid serial PRIMARY KEY, host text UNIQUE NOT NULL,
    commit_seq bigint NOT NULL DEFAULT 0, seen_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE ccotel.files (hid int NOT NULL, path text NOT NULL, dev bigint, ino bigint, head_len bigint,
    fingerprint text, read_offset bigint NOT NULL, read_to bigint NOT NULL DEFAULT 0, PRIMARY KEY (hid, path));
CREATE TABLE ccotel.acked_ids (hid int NOT NULL, owner text NOT NULL, span_ids bytea NOT NULL);
CREATE INDEX acked_ids_owner ON ccotel.acked_ids (hid, owner);
CREATE TABLE ccotel.claims (span_id bigint PRIMARY KEY, hid int NOT NULL, anchor bigint NOT NULL);
CREATE INDEX claims_anchor ON ccotel.claims (anchor);
CREATE TABLE ccotel.calls (digest bigint NOT NULL, anchor bigint NOT NULL, hid int NOT NULL,
    PRIMARY KEY (digest, anchor));
CREATE INDEX calls_anchor ON ccotel.calls (anchor);
CREATE INDEX calls_hid ON ccotel.calls (hid);
CREATE TABLE ccotel.prompts (digest bigint NOT NULL, anchor bigint NOT NULL, hid int NOT NULL,
    PRIMARY KEY (digest, anchor));
CREATE INDEX prompts_anchor ON ccotel.prompts (anchor);
CREATE INDEX prompts_hid ON ccotel.prompts (hid);
CREATE TABLE ccotel.marks (key text NOT NULL, anchor bigint NOT NULL, hid int NOT NULL, PRIMARY KEY (key, anchor));
CREATE INDEX marks_anchor ON ccotel.marks (anchor);
CREATE INDEX marks_key ON ccotel.marks (key);
CREATE TABLE ccotel.mark_claims (key text PRIMARY KEY, hid int NOT NULL);
CREATE TABLE ccotel.host_marks (hid int NOT NULL, key text NOT NULL, PRIMARY KEY (hid, key));
CREATE TABLE ccotel.counters (hid int NOT NULL, key text NOT NULL, value double precision NOT NULL,
    PRIMARY KEY (hid, key));
CREATE SCHEMA IF NOT EXISTS ccotel_ledger;
CREATE TABLE ccotel_ledger.meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE ccotel_ledger.calls (key text PRIMARY KEY, session_id text NOT NULL, time_ns bigint NOT NULL,
    start_ns bigint NOT NULL, cwd text, project text, model text, agent_id text, api_error int NOT NULL,
    input bigint NOT NULL, output bigint NOT NULL, cache_read bigint NOT NULL, cache_write bigint NOT NULL,
    cache_write_5m bigint NOT NULL, cache_write_1h bigint NOT NULL, reasoning bigint NOT NULL,
    cost double precision, priced int NOT NULL, version text);
CREATE INDEX calls_time ON ccotel_ledger.calls (time_ns);
CREATE TABLE ccotel_ledger.tools (session_id text NOT NULL, tool_use_id text NOT NULL, time_ns bigint NOT NULL,
    end_ns bigint NOT NULL, name text NOT NULL, agent_id text, error_type text, repaired int NOT NULL,
    PRIMARY KEY (session_id, tool_use_id));
CREATE TABLE ccotel_ledger.agents (session_id text NOT NULL, agent_key text NOT NULL, time_ns bigint NOT NULL,
    end_ns bigint NOT NULL, agent_type text NOT NULL, background int NOT NULL, interrupted int NOT NULL,
    PRIMARY KEY (session_id, agent_key));
CREATE TABLE ccotel_ledger.turns (session_id text NOT NULL, span_id text NOT NULL, time_ns bigint NOT NULL,
    end_ns bigint NOT NULL, cwd text, project text, version text, outcome text NOT NULL, api_calls int NOT NULL,
    tool_calls int NOT NULL, api_errors int NOT NULL, orphaned_tools int NOT NULL, lost_tools int NOT NULL,
    stalled int NOT NULL, PRIMARY KEY (session_id, span_id));
"""
# Leases on claims (see the module docstring). Rows from before are taken as delivered and their
# hosts as alive for good: neither is ever taken over, as before.
_V2_LEASES = """
ALTER TABLE ccotel.hosts ADD COLUMN lease_until timestamptz NOT NULL DEFAULT 'infinity';
ALTER TABLE ccotel.claims ADD COLUMN done boolean NOT NULL DEFAULT true;
CREATE INDEX claims_open ON ccotel.claims (hid) WHERE NOT done;
"""
# Offset markers (tail.Marker) with the checkpoints; those written before have none (trusted).
_V3_MARKERS = """
ALTER TABLE ccotel.files ADD COLUMN marker text;
"""
# Commit numbers per writer (an open state: catch-up workers share their host's id), no longer
# per host: one writer's lost answer must not be settled by another's number (``_flush``).
_V4_WRITERS = """
CREATE TABLE ccotel.writers (hid int NOT NULL, writer text NOT NULL, commit_seq bigint NOT NULL,
    seen_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (hid, writer));
"""
MIGRATIONS: tuple[str, ...] = (_V1, _V2_LEASES, _V3_MARKERS, _V4_WRITERS)  # MIGRATIONS[i] takes schema i to i + 1
SCHEMA_VERSION = len(MIGRATIONS)
