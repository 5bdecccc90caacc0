"""The docs match the tree: the Layout section of docs/architecture.md lists what src/populora holds (and nothing else), and
every path docs/architecture.md names exists."""

from __future__ import annotations

import importlib.util
import re
import unicodedata
from pathlib import Path

import populora
import populora.config

ROOT = Path(__file__).resolve().parents[2]
SRC = Path(populora.__file__).parent


def _layout_block() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Layout\n", 1)[1]
    return section.split("```\n", 2)[1]


def test_layout_lists_the_package_tree():
    block = _layout_block()
    listed = set(re.findall(r"^  ([\w.-]+/?)\s", block, flags=re.M))
    actual = {p.name + "/" for p in SRC.iterdir() if p.is_dir() and p.name != "__pycache__"}
    actual |= {p.name for p in SRC.glob("*.py") if p.name != "__init__.py"}
    assert listed == actual, f"missing: {sorted(actual - listed)}; not in the tree: {sorted(listed - actual)}"
    for top in re.findall(r"^([\w.-]+/)\s", block, flags=re.M):  # tests/, bench/, docs/
        assert (ROOT / top).is_dir(), top


def test_layout_names_the_train_modules():
    block = _layout_block()
    for name in (
        p.name for p in (SRC / "train").glob("*.py") if p.stem not in ("__init__", "commands", "bench")
    ):
        assert name in block, name


def test_architecture_paths_exist():
    text = (ROOT / "docs" / "architecture.md").read_text()
    paths = set(re.findall(r"(src/populora/[\w/]+(?:\.py)?|tests/[\w/]+\.py)", text))
    assert paths, "docs/architecture.md names no source path"
    for p in sorted(paths):
        assert (ROOT / p).exists(), f"docs/architecture.md names {p}, which does not exist"
    for name in re.findall(r"\]\(([\w.-]+\.md)\)", text):
        assert (ROOT / "docs" / name).exists(), name


def test_source_points_only_at_documents_in_the_repository():
    pattern = re.compile(r"(?<![\w/])((?:docs/|reference/|\.\./shared/)?[\w-]+\.md)\b")
    bad = []
    for path in SRC.rglob("*.py"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for ref in pattern.findall(line):
                if ref in ("results.md",):  # a file `populora eval` writes, not a document
                    continue
                if not (ROOT / ref).exists():
                    bad.append(f"{path.relative_to(SRC)}:{n}: {ref}")
    assert not bad, "source refers to documents that are not in the repository:\n" + "\n".join(bad)


def _gen_config():
    spec = importlib.util.spec_from_file_location("gen_config", ROOT / "docs" / "gen_config.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_config_key_page_is_generated_and_current():
    gen = _gen_config()
    page = gen.PAGE.read_text()
    assert gen.render(page) == page, "docs/config.md is out of date: run `python docs/gen_config.py`"
    for key in populora.config.all_keys():  # every key has a row, and every row its field docstring
        row = next((line for line in page.splitlines() if line.startswith(f"| `{key}` |")), None)
        assert row is not None, key
        assert populora.config.field_docs()[key].replace("|", "\\|") in row, key


def _anchors(page: Path) -> set[str]:
    """The heading anchors MkDocs gives a page (Python-Markdown's toc `slugify` of the heading text)."""

    def slugify(value: str, sep: str) -> str:
        value = unicodedata.normalize("NFKD", value).encode("ascii", "ignore").decode("ascii")
        return re.sub(r"[-\s]+", sep, re.sub(r"[^\w\s-]", "", value).strip().lower())

    out, fence = set(), False
    for line in page.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and re.match(r"#{1,6} ", line):
            out.add(slugify(line.lstrip("#").strip().replace("`", ""), "-"))
    return out


def test_readme_is_a_front_page_whose_links_resolve():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200, (
        "the README is the front page: keep it to 200 lines, move detail to docs/"
    )
    links = re.findall(r"\]\(([^)#\s]+)(?:#([^)\s]+))?\)", text)
    assert links, "the README links into docs/"
    for target, anchor in links:
        if "://" in target:
            continue
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"
        if anchor:
            assert anchor in _anchors(ROOT / target), f"README links to {target}#{anchor}: no such heading"
