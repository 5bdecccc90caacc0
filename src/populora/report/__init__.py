"""The run report: `populora report RUN_DIR` (one self-contained HTML page with the paper's diagnostic
plots and example problems) and `populora compare RUN_A RUN_B ... --out FILE.html` (runs overlaid).

`plots` draws matplotlib figures (Agg, no pyplot state), `html` assembles the pages, `synthetic` writes a
realistic run folder for tests and previews. Depends on `populora.diagnostics` only.
"""

from populora.report.html import render_compare, render_report, write_compare, write_report

__all__ = ["render_report", "write_report", "render_compare", "write_compare"]
