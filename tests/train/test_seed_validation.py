"""`train.seed` must be a valid (non-negative) seed: rejected with one line naming the key (issue 13 item 13)."""

import pytest

from populora.config import ConfigError, load_config


def test_negative_seed_is_rejected_with_a_clear_error():
    with pytest.raises(ConfigError) as err:
        load_config("tiny", ["train.seed=-1"])
    assert "train.seed: must be >= 0" in str(err.value) and "\n" not in str(err.value)
    assert load_config("tiny", ["train.seed=0"]).train.seed == 0
