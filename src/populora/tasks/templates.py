"""Prompt template sets: folders of small text files rendered with `string.Template` (`$name` fields).

A set is named (`"azr"`, `"compact"`, shipped under `tasks/templates/`) or given as a folder path with the
same file names. Files: `wrapper.txt` (`$prompt` -> the full prompt), `teacher_<task>.txt`,
`student_<task>.txt`, `reference.txt` (one reference triplet), `pair.txt` (one code_f pair),
`completion.txt` (`$thinking`, `$body` -> what a model writes after the prompt), `template.json`
(`strict_think_answer`: whether parsers require the R1 `</think><answer>...</answer>` frame).
Substituted values are never re-scanned, so `$` or `{}` inside programs are safe.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from string import Template

from populora.names import TEMPLATE_NAMES

TEMPLATE_ROOT = Path(__file__).parent / "templates"
__all__ = ["TEMPLATE_NAMES", "TEMPLATE_ROOT", "TemplateSet", "load_template"]
DEFAULT_TEMPLATE = "azr"
FILES = (
    "wrapper",
    "completion",
    "reference",
    "pair",
    "teacher_code_i",
    "teacher_code_o",
    "teacher_code_f",
    "student_code_i",
    "student_code_o",
    "student_code_f",
)


@dataclass(frozen=True)
class TemplateSet:
    name: str
    path: Path
    texts: dict
    strict_think_answer: bool
    description: str = ""
    # response prefixes per prompt part ("teacher_code_o": "```python\ndef f("): the prompt ends with them
    # and the parsers put them back (template.json "prefixes")
    prefixes: dict = field(default_factory=dict)

    def render(self, part: str, **fields: object) -> str:
        try:
            return Template(self.texts[part]).substitute({k: str(v) for k, v in fields.items()})
        except KeyError as e:
            raise ValueError(
                f"template {self.name}/{part}.txt needs field {e}; got {sorted(fields)}"
            ) from None


@lru_cache(maxsize=32)
def _load(path: Path) -> TemplateSet:
    texts = {}
    for part in FILES:
        f = path / f"{part}.txt"
        if not f.is_file():
            raise FileNotFoundError(f"template set {path} lacks {part}.txt (needs: {', '.join(FILES)})")
        t = f.read_text(encoding="utf-8")
        texts[part] = t[:-1] if t.endswith("\n") else t  # editors add a final newline; drop exactly one
    meta_file = path / "template.json"
    meta = json.loads(meta_file.read_text()) if meta_file.is_file() else {}
    return TemplateSet(
        name=path.name,
        path=path,
        texts=texts,
        strict_think_answer=bool(meta.get("strict_think_answer", False)),
        description=str(meta.get("description", "")),
        prefixes=_prefixes(meta.get("prefixes", {}), path),
    )


def _prefixes(raw: object, path: Path) -> dict:
    parts = [p for p in FILES if p.startswith(("teacher_", "student_"))]
    if not isinstance(raw, dict) or any(k not in parts or not isinstance(v, str) for k, v in raw.items()):
        raise ValueError(
            f"template {path}/template.json: 'prefixes' must map prompt parts ({', '.join(parts)}) to strings, "
            f"got {raw!r}"
        )
    return dict(raw)


def load_template(template: str | Path | TemplateSet | None = None) -> TemplateSet:
    """The template set for a name (`"azr"`, `"compact"`), a folder path, or a set (returned as is)."""
    if isinstance(template, TemplateSet):
        return template
    if template is None:
        template = DEFAULT_TEMPLATE
    if isinstance(template, str) and template in TEMPLATE_NAMES:
        return _load(TEMPLATE_ROOT / template)
    p = Path(template)
    if not p.is_dir():
        raise ValueError(
            f"unknown template {template!r}: use one of {', '.join(TEMPLATE_NAMES)} or a folder "
            f"with {', '.join(f + '.txt' for f in FILES)}"
        )
    return _load(p.resolve())
