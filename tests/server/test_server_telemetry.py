"""Telemetry and logging (server/telemetry.py, server/gate.py): the completion log writer, the log throttle."""

from __future__ import annotations


def test_log_throttle_lets_one_line_through_per_window_and_counts_the_rest():
    from server.telemetry import LogThrottle

    throttle = LogThrottle(every_s=10)
    assert throttle.admit("a", 0.0) == 0  # the first line goes out
    assert throttle.admit("a", 3.0) is None and throttle.admit("a", 9.9) is None  # held back
    assert throttle.admit("b", 5.0) == 0  # keys are independent
    assert throttle.admit("a", 10.5) == 2  # the next line says how many were held back
    assert throttle.admit("a", 11.0) is None


def test_log_writer_survives_bad_lines_and_paths_and_flush_waits_for_the_file(tmp_path):
    from server.telemetry import LogWriter

    writer = LogWriter()
    good = tmp_path / "log" / "a.jsonl"
    (tmp_path / "a-file").write_text("")
    writer.put(str(tmp_path / "a-file" / "x.jsonl"), "lost")  # its folder cannot be made: a file is there
    writer.put(str(good), '{"fill": "\ud800"}')  # a lone surrogate from a client's text
    writer.put(str(good), '{"n": 2}')
    writer.flush(5)
    assert good.read_text().splitlines() == ['{"fill": "\\ud800"}', '{"n": 2}']
