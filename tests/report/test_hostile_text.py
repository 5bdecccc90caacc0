"""Run-folder text is data in the report (issue 29): `$...$` in an invalid reason is not mathtext, markup in
any field is escaped, and a folder name that is not UTF-8 is shown with replacement characters."""

import json
import os
import subprocess
import sys

import pytest

from populora.report import write_compare, write_report
from populora.report.synthetic import write_synthetic_run
from populora.report.text import display

SCRIPT = "<script>alert(1)</script>"


def _hostile_run(path):
    """A synthetic run whose invalid reasons hold mathtext and markup, and one proposer's id markup."""
    d = write_synthetic_run(path, mode="population", steps=6, evolve_every=3, seed=3)
    recs = [json.loads(line) for line in (d / "problems.jsonl").read_text().splitlines()]
    for r in recs:
        if not r["valid"]:
            r["reason"] = "bad $x^{ $ and \\frac{ " + SCRIPT
        else:
            r["task"] = r["task"] + SCRIPT
            r["proposer"] = "T0" + SCRIPT
    (d / "problems.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert any(not r["valid"] for r in recs) and any(r["valid"] for r in recs)
    return d


def test_mathtext_and_markup_in_run_data_are_shown_literally(tmp_path):
    d = _hostile_run(tmp_path / "run $a^{$ <b>")
    html = write_report(d).read_text(encoding="utf-8")
    assert "<script" not in html  # every field is escaped
    assert "&lt;script&gt;" in html
    assert "bad $x^{ $" in html  # the reason is quoted as it was, in the caption


def test_compare_of_hostile_runs(tmp_path):
    a, b = _hostile_run(tmp_path / "a $x^{$"), _hostile_run(tmp_path / "b <i>")
    html = write_compare([a, b], tmp_path / "c.html").read_text(encoding="utf-8")
    assert "<script" not in html and "<i>" not in html


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS refuses non-UTF-8 file names")
def test_non_utf8_run_folder_name(tmp_path):
    d = write_synthetic_run(tmp_path / "tmp", mode="single", steps=4, seed=4)
    raw = os.fsencode(tmp_path) + b"/run-\xff\xfe"
    os.rename(os.fsencode(d), raw)
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}  # a strict UTF-8 console, as most terminals are
    res = subprocess.run(
        [sys.executable, "-m", "populora.cli", "report", os.fsdecode(raw)],
        capture_output=True,
        env=env,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr.decode(errors="replace")[-2000:]
    assert b"Traceback" not in res.stderr
    assert "run-\ufffd\ufffd" in res.stdout.decode("utf-8")
    page = open(raw + b"/report.html", encoding="utf-8").read()
    assert "run-\ufffd\ufffd" in page


def test_display_replaces_only_what_cannot_be_encoded():
    assert display("plain é") == "plain é"
    assert display(os.fsdecode(b"a\xffb")) == "a\ufffdb"
    assert display("x\ud800y") == "x\ufffdy"  # a stray surrogate, e.g. from a JSON log
