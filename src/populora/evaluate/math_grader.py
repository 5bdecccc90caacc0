r"""Math grading with math-verify (gold first) after AZR answer extraction.

``math_verify`` enforces its timeouts with ``SIGALRM``, which only works on a process's main thread. Grading
therefore runs either inline on the main thread (small batches, tests) or in a pool of *spawned* worker
processes, whose main threads own the alarms; a worker that still hangs is abandoned after a hard deadline
and the answer scores False. Never call `verify_answer` with timeouts from a non-main thread.

Protocol (AZR's evaluation): the prediction is ``extract_azr_answer(response)``; an
empty extraction scores False under the AZR prompt. Under the plain chat prompt, a response without
``<answer>``/``\\boxed`` falls back to math-verify's own extraction over the whole text. Gold and prediction
are wrapped as LaTeX math (``$...$``) and compared with ``verify(gold, pred)`` (float rounding 6, strict);
an exact match of the whitespace-normalised strings also counts (AZR's ``math_equal`` starts the same way).

Numbers are rewritten to plain decimals before math-verify sees them (`numbers_as_decimals`): inside
``$...$`` math-verify reads the ``e`` of ``4.5e33`` as Euler's number, ``-1./3`` as -1 and ``62.5%`` as text,
so e-notation, ``a\times10^{b}`` / ``a\cdot10^{b}``, trailing-dot decimals and percentages are turned into
the numbers they spell (``62.5\%`` -> ``62.5``, as AZR's grader also accepts the bare number).
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import re
import threading
from collections.abc import Sequence

from populora.evaluate.extract import extract_azr_answer

DEFAULT_TIMEOUT_S = 10  # math-verify defaults to 5 s; long Minerva expressions need more on a loaded CPU


def _norm(s: str) -> str:
    s = s.strip().strip("$").strip()
    s = re.sub(r"\\(?:left|right|!|,|;|:)", "", s)
    s = re.sub(r"\\text\{\s*\}", "", s)
    return re.sub(r"\s+", "", s).rstrip(".")


_NUM = r"(?:\d+(?:\.\d*)?|\.\d+)"
# A number not glued to a name or a command before it (`x2e3`, `\frac2e`), nor to more digits/dots after it.
_LEFT = r"(?<![A-Za-z_\\\d.])"
_E_NOTATION = re.compile(_LEFT + r"(" + _NUM + r")[eE]([+-]?\d+)(?![\d.])")
_TIMES_TEN = re.compile(
    _LEFT + r"(" + _NUM + r")\s*(?:\\times|\\cdot|\*|×)\s*10\s*\^\s*(?:\{\s*([+-]?\d+)\s*\}|([+-]?\d+))"
)
_TRAILING_DOT = re.compile(_LEFT + r"(\d+)\.(?![\d.])(?=\s*[^\s]|\s*$)")
_PERCENT = re.compile(_LEFT + r"(" + _NUM + r")\s*\\?%")


def _decimal(mantissa: str, exponent: str) -> str:
    from decimal import Decimal, InvalidOperation

    try:
        exp = int(exponent)
        if abs(exp) > 400:  # keep absurd exponents symbolic rather than writing 400 digits
            return f"{mantissa}\\times10^{{{exp}}}"
        text = format(Decimal(mantissa) * Decimal(10) ** exp, "f")
    except (InvalidOperation, ValueError):
        return f"{mantissa}e{exponent}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def numbers_as_decimals(s: str) -> str:
    """Write e-notation, ``a\\times10^{b}``, trailing-dot decimals and percentages as plain decimals."""
    s = _TIMES_TEN.sub(lambda m: _decimal(m.group(1), m.group(2) or m.group(3)), s)
    s = _E_NOTATION.sub(lambda m: _decimal(m.group(1), m.group(2)), s)
    s = _PERCENT.sub(lambda m: m.group(1), s)
    return _TRAILING_DOT.sub(lambda m: m.group(1), s)


def _wrap(s: str) -> str:
    """An extracted answer as LaTeX math for `parse`: currency ``\\$`` and stray inner ``$`` removed."""
    s = numbers_as_decimals(s.strip().replace("\\$", ""))
    if s.startswith("$") or "\\[" in s or "\\(" in s:
        return s
    # Inner dollars in a bare answer are data glitches (e.g. Minerva's `a+$ $b`): drop them.
    return "$" + s.replace("$", " ") + "$"


def _parse(text: str, timeout: int | None, expr_first: bool = False) -> list:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    configs = [LatexExtractionConfig(), ExprExtractionConfig()]
    if expr_first:
        configs.reverse()
    try:
        return parse(text, extraction_config=configs, parsing_timeout=timeout)
    except Exception:  # noqa: BLE001 - a malformed answer must never crash grading
        return []


_PLAIN_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)")


def _numeric_equal(gold: str, pred: str) -> bool | None:
    """AZR's ``numeric_equal`` (``isclose``, rel_tol 1e-4) when both sides are plain numbers, else None."""
    import math

    a = numbers_as_decimals(gold.strip().strip("$").replace(",", "").strip())
    b = numbers_as_decimals(pred.strip().strip("$").replace(",", "").strip())
    if not (_PLAIN_NUMBER.fullmatch(a) and _PLAIN_NUMBER.fullmatch(b)):
        return None
    if "." not in a or "." not in b:  # an integer gold/answer is an exact count: 11001 is not 11000
        from decimal import Decimal

        return Decimal(a) == Decimal(b)
    return math.isclose(float(a), float(b), rel_tol=1e-4)


def verify_answer(gold: str, pred: str, timeout: int | None = DEFAULT_TIMEOUT_S, exact: bool = True) -> bool:
    """True when ``pred`` (an extracted answer string) equals ``gold``. Main thread only if timeout is set.

    ``exact=False`` skips the string shortcut so that math-verify must parse both sides (the oracle uses it).
    """
    if not pred.strip():
        return False
    if exact and _norm(gold) == _norm(pred):
        return True
    numeric = _numeric_equal(gold, pred)
    if numeric is not None:
        return numeric
    from math_verify import verify

    gold_parsed = _parse(_wrap(gold), timeout)
    if not gold_parsed:
        return False
    pred_parsed = _parse(_wrap(pred), timeout)
    if not pred_parsed:
        return False
    try:
        return bool(verify(gold_parsed, pred_parsed, timeout_seconds=timeout))
    except Exception:  # noqa: BLE001
        return False


def grade_response(
    gold: str,
    response: str,
    prompt_style: str = "azr",
    timeout: int | None = DEFAULT_TIMEOUT_S,
    exact: bool = True,
) -> bool:
    """Grade one model response against one gold answer (see module docstring)."""
    pred = extract_azr_answer(response)
    if pred:
        return verify_answer(gold, pred, timeout, exact)
    if prompt_style == "azr":
        return False
    # Chat prompt: let math-verify find the answer itself ("final answer is", last number, ...).
    from math_verify import verify

    gold_parsed = _parse(_wrap(gold), timeout)
    pred_parsed = _parse(response, timeout)
    if not gold_parsed or not pred_parsed:
        return False
    try:
        return bool(verify(gold_parsed, pred_parsed, timeout_seconds=timeout))
    except Exception:  # noqa: BLE001
        return False


def _grade_job(args: tuple[str, str, str, int, bool]) -> bool:
    gold, response, style, timeout, exact = args
    return grade_response(gold, response, style, timeout, exact)


def _init_worker() -> None:
    import os

    os.environ.setdefault("OMP_NUM_THREADS", "1")


class MathGrader:
    """Grades (gold, response) pairs, in parallel worker processes when ``workers > 1``.

    Use as a context manager; `grade_many` keeps order. With ``workers <= 1`` on the main thread it grades
    inline; off the main thread it always uses a (one-worker) pool so the signal-based timeouts stay valid.
    """

    def __init__(
        self,
        workers: int = 1,
        timeout_s: int = DEFAULT_TIMEOUT_S,
        prompt_style: str = "azr",
        exact: bool = True,
    ):
        self.workers = max(1, int(workers))
        self.exact = exact
        self.timeout_s = timeout_s
        self.prompt_style = prompt_style
        self._pool: cf.ProcessPoolExecutor | None = None

    def _inline(self) -> bool:
        return self.workers <= 1 and threading.current_thread() is threading.main_thread()

    def __enter__(self) -> MathGrader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def _get_pool(self) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            # spawn: forking a process that holds torch/OpenMP threads can deadlock.
            self._pool = cf.ProcessPoolExecutor(
                self.workers, mp_context=mp.get_context("spawn"), initializer=_init_worker
            )
        return self._pool

    def grade_many(self, pairs: Sequence[tuple[str, str]], progress=None) -> list[bool]:
        """``pairs`` = [(gold, response), ...] -> [correct, ...]; ``progress(n)`` is called as items finish."""
        jobs = [(g, r, self.prompt_style, self.timeout_s, self.exact) for g, r in pairs]
        if self._inline():
            out = []
            for job in jobs:
                out.append(_grade_job(job))
                if progress:
                    progress(1)
            return out
        pool = self._get_pool()
        futures = [pool.submit(_grade_job, job) for job in jobs]
        # Hard deadline per item on top of math-verify's own (parse + verify, each with the timeout).
        deadline = 4 * self.timeout_s + 30
        out = []
        for fut in futures:
            try:
                out.append(bool(fut.result(timeout=deadline)))
            except Exception:  # noqa: BLE001 - timeout or a crashed worker scores False
                out.append(False)
            if progress:
                progress(1)
        return out
