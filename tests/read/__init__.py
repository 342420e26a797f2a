"""Tests of ccotel/read/: discovering, watching, tailing and parsing transcripts, format drift."""
