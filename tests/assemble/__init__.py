"""Tests of ccotel/assemble/: transcripts to span trees, digests."""
