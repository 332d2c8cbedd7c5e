"""The repository's own pages: README and the architecture page name only what the repository has."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [p for d in ("actors", "coordination", "jobs") for p in (ROOT / d).rglob("*.py")]


def _defined() -> set[str]:
    """Every class, function and method name defined in the sources."""
    names = set()
    for path in SOURCES:
        names.update(re.findall(r"^\s*(?:async\s+)?(?:def|class)\s+(\w+)", path.read_text(), re.MULTILINE))
    return names


def test_the_pages_do_not_point_outside_the_repository():
    for page in ("README.md", "docs/ARCHITECTURE.md", "docs/KAFKA_DIFFERENCES.md", "BENCHMARKS.md"):
        text = (ROOT / page).read_text()
        assert "../shared" not in text and "DESIGN.md" not in text, page


def test_the_readme_links_the_architecture_page_and_the_comparison_with_kafka():
    readme = (ROOT / "README.md").read_text()
    assert "docs/ARCHITECTURE.md" in readme and "docs/KAFKA_DIFFERENCES.md" in readme


def test_every_kray_function_the_comparison_with_kafka_names_is_in_the_file_it_names():
    """`file.py: function` in the table: the function is defined in that file (Kafka's names are not checked)."""
    text = (ROOT / "docs/KAFKA_DIFFERENCES.md").read_text()
    by_name = {}
    for path in SOURCES:
        by_name.setdefault(path.name, []).append(path.read_text())
    named = re.findall(r"`(\w+\.py): (\w+)`", text)
    missing = [(f, fn) for f, fn in named if not any(
        re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{fn}\b", src, re.MULTILINE) for src in by_name.get(f, []))]
    assert named and not missing, missing


def test_every_file_and_function_the_architecture_page_names_exists():
    text = (ROOT / "docs/ARCHITECTURE.md").read_text()
    files = {p.name for p in SOURCES}
    named_files = re.findall(r"`(?:[\w/]+/)?(\w+\.py)`", text)
    assert named_files and not [f for f in named_files if f not in files]
    for path in re.findall(r"`([\w/]+/[\w]+\.py)`", text):
        assert (ROOT / path).exists(), path
    defined = _defined()
    named = re.findall(r"`([A-Za-z_]\w*\.\w+)`", text)  # `Class.method`, `module.function` (not Kafka's settings)
    missing = [n for n in named if not re.search(r"\.(py|jsonl)$", n) and not all(
        part in defined or f"{part}.py" in files for part in n.split("."))]
    assert named and not missing, missing
