"""Tests of ccotel/spans/: building spans, their attributes, prices."""
