"""The streamstop command, run as a real process where it matters (stdin, pipes, exit codes)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from streamstop._cli import main


def run(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "streamstop", *args],
        input=stdin,
        capture_output=True,
        timeout=30,
        check=False,
    )


def test_filter_cuts_at_the_first_stop() -> None:
    result = run("filter", "--stop", "</s>", "--stop", "###", stdin=b"hello ### world </s>")
    assert result.returncode == 0
    assert result.stdout == b"hello "


def test_filter_interprets_escapes_in_stops() -> None:
    result = run("filter", "--stop", r"\n\nUser:", "-v", stdin=b"Sure.\n\nUser: more")
    assert result.stdout == b"Sure."
    assert b"stopped at '\\n\\nUser:'" in result.stderr


def test_filter_include_stop_and_no_match() -> None:
    assert run("filter", "--stop", "</s>", "--include-stop", stdin=b"a</s>b").stdout == b"a</s>"
    assert run("filter", "--stop", "</s>", stdin=b"a</").stdout == b"a</"


def test_filter_keeps_multibyte_text_whole() -> None:
    text = "café ☃ 好的。用户：hi".encode()
    assert run("filter", "--stop", "。用户", stdin=text).stdout == "café ☃ 好的".encode()


def test_filter_bad_utf8_is_a_clear_error_unless_replaced() -> None:
    failed = run("filter", "--stop", "x", stdin=b"ok\xff")
    assert failed.returncode == 2
    assert b"can't decode byte 0xff" in failed.stderr
    replaced = run("filter", "--stop", "x", "--errors", "replace", stdin=b"ok\xff")
    assert replaced.stdout == "ok\ufffd".encode()


def test_filter_rejects_a_bad_escape_naming_it() -> None:
    result = run("filter", "--stop", "bad\\x")
    assert result.returncode == 2
    assert b"'bad\\\\x'" in result.stderr


def test_filter_requires_a_stop() -> None:
    assert run("filter").returncode == 2


def test_filter_streams_before_input_ends() -> None:
    """What is safe comes out while the writer is still writing; the stop ends the process."""
    process = subprocess.Popen(
        [sys.executable, "-m", "streamstop", "filter", "--stop", "</s>"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        process.stdin.write(b"first </")
        process.stdin.flush()
        assert os.read(process.stdout.fileno(), 100) == b"first "
        process.stdin.write(b"s> never")
        process.stdin.flush()
        # A bound, not a synchronisation: the stop ends the process at once.
        assert process.wait(timeout=30) == 0
        assert process.stdout.read() == b""
    finally:
        process.kill()
        process.wait()
        process.stdin.close()
        process.stdout.close()


def test_demo_shows_where_it_stopped(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--delay", "0"]) == 0
    out = capsys.readouterr().out
    assert "so everything else reaches you at once." in out
    assert "never meant to be shown" not in out
    assert "stopped at '\\n\\nUser:'" in out


def test_demo_with_own_stop(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--delay", "0", "--stop", "filter"]) == 0
    out = capsys.readouterr().out
    assert "This " in out
    assert "holds back" not in out
    assert "stopped at 'filter'" in out


# -- messages that help: a mistyped flag is shown with its command's usage ---------------------

MISTYPED = {
    "filter": (["filter", "--stop", "x", "--stpo", "y"], "--stpo y", "--include-stop"),
    "demo": (["demo", "--dealy", "0"], "--dealy 0", "--delay DELAY"),
    "serve": (["serve", "--prot", "1"], "--prot 1", "--max-stops N"),
    "proxy": (["proxy", "--upstrem", "http://u"], "--upstrem http://u", "--upstream URL"),
}


@pytest.mark.parametrize("command", MISTYPED)
def test_a_mistyped_flag_prints_the_commands_usage(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, unknown, shown_flag = MISTYPED[command]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: streamstop {command} ")
    assert shown_flag in err  # the command's own flags, to pick the right one from
    assert err.rstrip().endswith(f"streamstop {command}: error: unrecognized arguments: {unknown}")


def test_a_flag_before_the_command_is_the_top_levels(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--bogus", "demo"])
    err = capsys.readouterr().err
    assert err.startswith("usage: streamstop [-h] [--version] COMMAND")
    assert "streamstop: error: unrecognized arguments: --bogus" in err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from streamstop import __version__

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"streamstop {__version__}\n"
