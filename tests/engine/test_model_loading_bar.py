"""transformers' "Loading weights" bar is shown only on a terminal: loading the bundled model with stderr
captured (a log file, a pipe) writes no bar, and the global bar setting is as it was afterwards."""

from __future__ import annotations

from transformers.utils import logging as hf_logging

from populora.engine.models import load_model_and_tokenizer


def test_no_loading_bar_in_a_log(capfd):
    assert hf_logging.is_progress_bar_enabled()
    load_model_and_tokenizer("tiny")
    assert "Loading weights" not in capfd.readouterr().err
    assert hf_logging.is_progress_bar_enabled()  # restored


def test_a_bar_turned_off_stays_off(capfd):
    hf_logging.disable_progress_bar()
    try:
        load_model_and_tokenizer("tiny")
        assert not hf_logging.is_progress_bar_enabled()
    finally:
        hf_logging.enable_progress_bar()
    assert "Loading weights" not in capfd.readouterr().err
