"""The shell every HTML page shares: the inline stylesheet, the page frame, a figure card (an embedded PNG
with its caption, or a sentence saying why there is none), escaping and number formatting, and the atomic
write that puts a page on disk. The experiment pages reuse the frame and the stylesheet.
"""

from __future__ import annotations

import html
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from populora.report.figure_style import to_png_base64
from populora.report.text import display

CSS = """
:root { --ink:#212529; --muted:#6c757d; --line:#dee2e6; --bg:#f8f9fa; --accent:#1c7ed6; }
* { box-sizing: border-box; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: var(--ink); background: var(--bg); margin: 0; line-height: 1.45; }
main { max-width: 980px; margin: 0 auto; padding: 24px 20px 60px; }
h1 { font-size: 1.6rem; margin: 0 0 4px; }
h2 { font-size: 1.15rem; margin: 0 0 8px; }
.sub { color: var(--muted); margin: 0 0 16px; }
.badges span { display: inline-block; background: #e7f5ff; color: #1864ab; border-radius: 12px;
               padding: 2px 10px; margin: 0 6px 6px 0; font-size: .85rem; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 16px 18px;
        margin: 16px 0; }
.card img { max-width: 100%; height: auto; display: block; margin: 0 auto; }
.cap { color: #495057; font-size: .92rem; margin: 8px 0 0; }
.empty { color: var(--muted); font-style: italic; }
table { border-collapse: collapse; font-size: .9rem; }
td, th { padding: 4px 14px 4px 0; text-align: left; vertical-align: top; }
th { color: var(--muted); font-weight: 600; }
.kv { display: grid; grid-template-columns: repeat(3, max-content minmax(0, 1fr)); gap: 3px 12px;
      font-size: .9rem; margin: 0 0 12px; }
.kv dt { color: var(--muted); }
.kv dd { margin: 0; }
@media (max-width: 760px) { .kv { grid-template-columns: max-content 1fr; } }
pre { background: #f1f3f5; border-radius: 6px; padding: 10px 12px; overflow-x: auto; font-size: .85rem;
      margin: 6px 0; }
.examples { display: grid; grid-template-columns: 1fr 1fr; gap: 0 22px; }
@media (max-width: 760px) { .examples { grid-template-columns: 1fr; } }
.examples h3 { font-size: 1rem; margin: 8px 0 6px; }
.problem { margin: 0 0 14px; }
.feat { color: #495057; font-size: .88rem; }
.notes { background: #fff9db; border: 1px solid #ffe066; border-radius: 8px; padding: 8px 14px; }
details summary { cursor: pointer; color: var(--accent); }
nav a { margin-right: 12px; font-size: .9rem; color: var(--accent); text-decoration: none; }
"""


def esc(x: object) -> str:
    # run-folder text is data: shown literally, and encodable whatever bytes its folder name holds
    return html.escape(display(x), quote=True)


def fmt(x: object, digits: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        if not np.isfinite(x):
            return "–"
        return f"{x:.{digits}g}"
    if isinstance(x, list | tuple):
        return ", ".join(map(str, x))
    return str(x)


def page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body><main>\n{body}\n</main></body></html>\n"
    )


def figure_card(
    anchor: str, title: str, make: Callable[[], object], caption: str | Callable[[], str], empty: str
) -> str:
    fig = make()
    head = f'<section class="card" id="{anchor}"><h2>{esc(title)}</h2>'
    if fig is None:
        return f'{head}<p class="empty">{esc(empty)}</p></section>\n'
    png = to_png_base64(fig)
    cap = caption() if callable(caption) else caption
    return (
        f'{head}<img alt="{esc(title)}" src="data:image/png;base64,{png}">'
        f'<p class="cap">{cap}</p></section>\n'
    )


def rate(x: float) -> str:
    return f"{x:.2f}" if np.isfinite(x) else "–"


def atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(display(text), encoding="utf-8")
    os.replace(tmp, path)
