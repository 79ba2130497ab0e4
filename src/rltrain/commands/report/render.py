"""One document, written twice: Markdown (figures beside it) and self-contained HTML (figures
embedded as base64 PNG, inline CSS, no script and no external reference)."""

from __future__ import annotations

import base64
import csv
import dataclasses
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CSS = """
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem;
       color: #222; line-height: 1.45; }
table { border-collapse: collapse; margin: 0.8rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.55rem; text-align: left; }
th { background: #f2f2f2; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
img { max-width: 100%; }
code { background: #f4f4f4; padding: 0 0.2rem; }
figcaption { font-size: 0.85rem; color: #555; }
"""


@dataclasses.dataclass
class Doc:
    """Headings, paragraphs, bullet lists, tables and figures, in order."""

    title: str
    blocks: list[tuple[str, Any]] = dataclasses.field(default_factory=list)

    def heading(self, text: str) -> None:
        self.blocks.append(("h2", text))

    def subheading(self, text: str) -> None:
        self.blocks.append(("h3", text))

    def para(self, text: str) -> None:
        self.blocks.append(("p", text))

    def bullets(self, items: Sequence[str]) -> None:
        if items:
            self.blocks.append(("ul", list(items)))

    def table(self, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        self.blocks.append(("table", (list(header), [list(r) for r in rows])))

    def figure(self, stem: str, caption: str) -> None:
        """``stem.png`` and ``stem.svg`` in the report directory."""
        self.blocks.append(("figure", (stem, caption)))


def markdown(doc: Doc) -> str:
    out = [f"# {doc.title}", ""]
    for kind, body in doc.blocks:
        if kind in ("h2", "h3"):
            out += ["#" * int(kind[1]) + " " + body, ""]
        elif kind == "p":
            out += [body, ""]
        elif kind == "ul":
            out += [f"- {item}" for item in body] + [""]
        elif kind == "table":
            header, rows = body
            out.append("| " + " | ".join(map(_md_cell, header)) + " |")
            out.append("|" + "|".join(" --- " for _ in header) + "|")
            out += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in rows]
            out.append("")
        elif kind == "figure":
            stem, caption = body
            out += [f"![{caption}]({stem}.png)", "", f"*{caption}* ([SVG]({stem}.svg))", ""]
    return "\n".join(out)


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def page(doc: Doc, figures: Path) -> str:
    """The HTML page; figures are read from ``figures`` and embedded."""
    esc = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{esc(doc.title)}</title>", f"<style>{CSS}</style></head><body>",
           f"<h1>{esc(doc.title)}</h1>"]
    for kind, body in doc.blocks:
        if kind in ("h2", "h3", "p"):
            out.append(f"<{kind}>{_inline(body)}</{kind}>")
        elif kind == "ul":
            out.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in body) + "</ul>")
        elif kind == "table":
            header, rows = body
            out.append("<table><thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in header)
                       + "</tr></thead><tbody>")
            out += ["<tr>" + "".join(_td(c) for c in row) + "</tr>" for row in rows]
            out.append("</tbody></table>")
        elif kind == "figure":
            stem, caption = body
            data = base64.b64encode((figures / f"{stem}.png").read_bytes()).decode("ascii")
            out.append(f'<figure><img alt="{esc(caption)}" src="data:image/png;base64,{data}">'
                       f"<figcaption>{esc(caption)}</figcaption></figure>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _inline(text: str) -> str:
    """Escaped text with Markdown's `code` spans as <code>."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _td(cell: str) -> str:
    cell = str(cell)
    numeric = cell[:1].isdigit() or (cell[:1] == "-" and cell[1:2].isdigit())
    return f'<td class="num">{html.escape(cell)}</td>' if numeric else f"<td>{_inline(cell)}</td>"


def write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
