"""Model output that the compiler warns about (`1if`, `'\\d'`) is parsed without a warning on stderr
(`populora.pyparse`), through the real parse paths of proposals, answers and values, while other code's
SyntaxWarnings are left alone. Run in a fresh interpreter with every warning shown (`-W default`), as a user's
console would show them, outside pytest's own warning capture."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROGRAM = "def f(x):\n    y = 1if x else 2\n    s = '\\\\d'\n    return y"


def _stderr(code: str) -> str:
    res = subprocess.run(
        [sys.executable, "-W", "default", "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    return res.stderr


def test_model_text_parses_without_warnings():
    err = _stderr(
        f"""
        from populora.tasks import get
        from populora.tasks.policy import parse_program
        from populora.tasks.masking import program_key
        from populora.sandbox.values import parse_value
        from populora.diagnostics.features import program_features
        program = {PROGRAM!r}
        tree, reason = parse_program(program)
        assert tree is not None, reason
        assert program_key(program) is not None
        answer = get("code_f").parse_answer("```python\\n" + program + "\\n```")
        assert answer, answer  # an Answer (a FormatError is falsy)
        program_features(program)
        assert parse_value("[1, 2]") == [1, 2]
        print("ok")
        """
    )
    assert "Warning" not in err, err


def test_other_code_still_warns():
    err = _stderr(
        """
        import ast
        import populora.pyparse
        ast.parse("y = 1if 2 else 3")
        """
    )
    assert "SyntaxWarning: invalid decimal literal" in err
