"""Tests of ccotel/run/: the pipeline's checkpoints and commits, catch-up, detectors, the reader, the
runner, signals, memory."""
