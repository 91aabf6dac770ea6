"""The README's result tables equal what pipeline.analysis.readme_tables renders from docs/reference/."""

from __future__ import annotations

import pytest

from pipeline.analysis.readme_tables import (
    COLUMNS,
    README,
    REFERENCE,
    SECTIONS,
    lr,
    read_reference,
    render,
    replace_sections,
    sections_of,
    tokens,
)


def test_readme_tables_are_rendered_from_the_reference_outputs():
    """Edit the tables by `make docs` (from a study's outputs), never by hand."""
    rendered = render(read_reference())
    assert sections_of(README.read_text()) == rendered


def test_reference_outputs_are_small():
    files = sorted(REFERENCE.glob("*.parquet"))
    assert sorted(f.stem for f in files) == sorted(COLUMNS)
    assert sum(f.stat().st_size for f in files) < 300_000


def test_replace_sections_round_trip():
    text = "intro\n" + "".join(
        f"<!-- tables:{n}:begin -->\nold\n<!-- tables:{n}:end -->\nmid\n" for n in SECTIONS
    )
    new = {n: f"| {n} |\n" for n in SECTIONS}
    out = replace_sections(text, new)
    assert sections_of(out) == new
    assert replace_sections(out, new) == out
    assert out.startswith("intro\n") and out.count("mid\n") == len(SECTIONS)
    with pytest.raises(ValueError, match="markers"):
        sections_of("no markers here")


def test_number_formats():
    assert [tokens(b) for b in (250_000, 2_000_000, 8_000_000)] == ["0.25M", "2M", "8M"]
    assert [lr(x) for x in (1e-3, 3e-3, 1e-2, 1.5e-4)] == ["1e-3", "3e-3", "1e-2", "1.5e-4"]
