"""Config input is small plain data (issue 29): YAML aliases are refused, so a few hundred bytes cannot stand
for a structure whose repr is hundreds of MB, and every config error quotes values cut to SHOW_CHARS."""

import pytest

from populora.config import SHOW_CHARS, ConfigError, load_config, read_yaml, resume_config, show


def _alias_bomb() -> str:
    """Nine levels of nine-fold aliases: 9**9 strings once expanded (an 80 MB+ repr), 374 bytes of YAML."""
    parts = ["&a [" + ",".join(['"xxxxxxxx"'] * 9) + "]"]
    names = "abcdefgh"
    for prev, cur in zip(names, names[1:], strict=False):
        parts.append(f"&{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "train:\n  steps: [" + ",\n   ".join(parts) + "]\n"


def test_alias_bomb_gives_a_short_specific_error(tmp_path):
    text = _alias_bomb()
    assert len(text) < 400
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(str(path))
    msg = str(err.value)
    assert len(msg) < 300 and "\n" not in msg
    assert "aliases" in msg and str(path) in msg


def test_any_alias_is_refused_even_a_harmless_one():
    with pytest.raises(Exception, match="aliases"):
        read_yaml("train: {steps: &n 3, checkpoint_every: *n}")
    assert read_yaml("train: {steps: 3}") == {"train": {"steps": 3}}


@pytest.mark.parametrize(
    "yaml_text",
    [
        "train: {steps: " + "[" * 50 + "1" + "]" * 50 + "}",  # deep
        "train: {steps: [" + ", ".join(["123456789"] * 20000) + "]}",  # wide
        "train: {steps: " + "9" * 50 + "x" * 100000 + "}",  # one long string
        "population: {mode: " + "z" * 100000 + "}",  # a Literal field
        "tasks: {types: [code_i, " + "q" * 100000 + "]}",  # a list field, checked by validate
        "x" * 100000 + ": {steps: 3}",  # an unknown section
        "train: {" + "y" * 100000 + ": 3}",  # an unknown key
        "train: " + "[" + "7, " * 30000 + "]",  # a section that is not a mapping
    ],
)
def test_every_config_error_is_bounded(tmp_path, yaml_text):
    path = tmp_path / "big.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as err:
        load_config(str(path))
    msg = str(err.value)
    assert len(msg) <= len(str(path)) + 2 * SHOW_CHARS + 200, msg[:400]
    assert "\n" not in msg


def test_overrides_and_resume_are_bounded():
    with pytest.raises(ConfigError) as err:
        load_config("tiny", ["train.steps=" + "w" * 100000])
    assert len(str(err.value)) < 500
    with pytest.raises(ConfigError) as err:
        resume_config({"train": {"steps": list(range(100000))}})
    assert len(str(err.value)) < 500


def test_show_keeps_short_values_whole():
    assert show("code_i") == "'code_i'"
    assert show([1, 2]) == "[1, 2]"
    assert len(show("a" * 10000)) <= SHOW_CHARS
