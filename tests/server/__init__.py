"""Tests of streamstop.chat, streamstop.server and the server commands."""
