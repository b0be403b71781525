"""Tests of ragstitch."""
