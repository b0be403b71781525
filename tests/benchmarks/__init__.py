"""Tests of the benchmarks' peers and measuring code (correctness only, never speed)."""
