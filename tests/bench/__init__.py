"""Tests of bench/: the benchmarks' smoke run and the fast paths bench/NOTES.md describes."""
