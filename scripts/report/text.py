"""The report's text as data, and its two renderings: Markdown (results.md, the README, results/index.md) and HTML
(the reader's templates, `scripts/site_templates/text.html`). What the numbers mean: docs/methodology.md.

A cell or a line is a `str`, or a tuple of `Span`s where part of it is emphasised (a failed status, a metric outside
its band) or is code (a machine's or a profile's name); a table is a `Table`: its column heads, which columns are
right-aligned, its rows of such cells, and a note under it. The data says what a piece of text is; only the
renderings (`markdown`, `markdown_table`, and the template's macros) say how it looks, and only they escape.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import NamedTuple

from tabulate import DataRow, TableFormat, tabulate

EMPTY = "—"  # a value the record does not have (schema 1, a failed run, an eager framework)
NOT_COMPARABLE = "†"  # beside the times of a row whose accuracy lies outside its band
MIB = 2**20


class Span(NamedTuple):
    """A piece of a line: plain text, or text with a style ('em', 'strong' or 'code')."""

    text: str
    style: str = ""


Text = str | tuple[Span, ...]
MARKDOWN = {"": "{}", "em": "*{}*", "strong": "**{}**", "code": "`{}`"}


def em(text: str) -> Span:
    return Span(str(text), "em")


def strong(text: str) -> Span:
    return Span(str(text), "strong")


def code(text: str) -> Span:
    return Span(str(text), "code")


def spans(value: Text) -> tuple[Span, ...]:
    """Any text as spans (a `str` is one plain span): what the templates iterate over."""
    return (Span(value),) if isinstance(value, str) else tuple(value)


def plain(value: Text) -> str:
    """The text without its styles: a plot's label, a line the runner prints."""
    return "".join(s.text for s in spans(value))


def markdown(value: Text, one_line: bool = False) -> str:
    """Markdown of a text. `one_line`: for a table cell or a paragraph of data, line breaks and runs of spaces
    become one space and `|` is escaped, so that an error message stays inside its cell."""

    def shown(text: str) -> str:
        return re.sub(r"\s+", " ", text).replace("|", "\\|") if one_line else text

    out = "".join(MARKDOWN[s.style].format(shown(s.text)) for s in spans(value) if s.text)
    return out.strip() if one_line else out


@dataclass
class Table:
    """A table as data: column heads, whether each column is right-aligned (numbers), rows of cells, a note."""

    header: list[Text]
    right: list[bool]
    rows: list[list[Text]]
    note: str = ""


def column_table(columns, items, note: str = "") -> Table:
    """A Table from (head, right-aligned, the cell of an item) columns, one row per item."""
    return Table(
        [head for head, _, _ in columns],
        [right for _, right, _ in columns],
        [[show(item) for _, _, show in columns] for item in items],
        note,
    )


def markdown_table(table: Table) -> str:
    """A GitHub Markdown table, compact (`| a | b |`, no padding: the committed tables and the tests read it so),
    with `---:` over the right-aligned columns; then its note, if any, as a paragraph."""
    row = DataRow("|", "|", "|")
    rule = "|" + "|".join("---:" if right else "---" for right in table.right) + "|"
    compact = TableFormat(
        lineabove=None,
        linebelowheader=lambda widths, aligns: rule,
        linebetweenrows=None,
        linebelow=None,
        headerrow=row,
        datarow=row,
        padding=1,
        with_header_hide=None,
    )
    text = tabulate(
        [[markdown(c, one_line=True) for c in cells] for cells in table.rows],
        [markdown(h, one_line=True) for h in table.header],
        tablefmt=compact,
        stralign=None,
        numalign=None,
        disable_numparse=True,
    )
    return text + (f"\n\n{table.note}" if table.note else "")


# --- numbers as cells ----------------------------------------------------------------------------------------------


def fmt(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return EMPTY
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 10**digits else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def fmt_metric(value) -> str:
    """Accuracy and AUC to three decimals; a throughput as fmt() does."""
    if isinstance(value, float) and value <= 1:
        return f"{value:.3f}"
    return fmt(value)


def fmt_ms(seconds, digits: int = 3) -> str:
    return fmt(None if seconds is None else seconds * 1000.0, digits)


def fmt_pct(fraction, digits: int = 2) -> str:
    return EMPTY if fraction is None else f"{fmt(100.0 * fraction, digits)}%"


def fmt_mib(n_bytes) -> str:
    return fmt(None if n_bytes is None else n_bytes / MIB)


def fmt_range_ms(low, high) -> str:
    return EMPTY if low is None or high is None else f"{fmt_ms(low)}–{fmt_ms(high)}"
