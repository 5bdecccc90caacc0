"""docs/architecture.md's "What each imports" table agrees with the import graph the source has."""

import re
from pathlib import Path

from test_structure import package_graph

PAGE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"


def _unit_name(cell: str) -> str:
    """`train/` -> populora.train, `config_cli.py` -> populora.config_cli."""
    return "populora." + cell.strip().strip("`").removesuffix("/").removesuffix(".py")


def documented_imports() -> dict[str, set[str]]:
    """The table, row by row; a row naming several packages gives each its `;`-separated share."""
    text = PAGE.read_text()
    table = text.split("What each imports", 1)[1].split("\n\n", 2)[1]
    out: dict[str, set[str]] = {}
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        packages = [_unit_name(p) for p in cells[0].split(",")]
        shares = cells[1].split(";") if len(packages) > 1 else [cells[1]]
        assert len(shares) == len(packages), line
        for pkg, share in zip(packages, shares, strict=True):
            share = re.sub(r"\([^)]*\)", "", share)  # "(the registry, inside a function)" is a remark
            out[pkg] = {_unit_name(n) for n in share.split(",") if n.strip()}
    return out


def test_the_imports_table_is_the_import_graph():
    graph = package_graph()
    table = documented_imports()
    missing = {p: sorted(d) for p, d in graph.items() if p not in table and d}
    assert not missing, f"docs/architecture.md lists no row for {missing}: add one"
    wrong = {
        p: {
            "in the code, not the table": sorted(graph.get(p, set()) - d),
            "in the table, not the code": sorted(d - graph.get(p, set())),
        }
        for p, d in table.items()
        if d != graph.get(p, set())
    }
    assert not wrong, f"docs/architecture.md's imports table is out of step with the code: {wrong}"
