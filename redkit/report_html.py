"""`<run>/report.html`: one self-contained page with the run's tables and every study and analysis run on it.

The markdown reports (the run's report.md, then studies/<name>/report.md) are rendered with
Python-Markdown and every figure is inlined as a data URI, so the page needs no other file and
no network. `redkit report --run DIR` rebuilds it; every study rebuilds it when it finishes.
"""

import base64
import html
import re
from pathlib import Path

import markdown

from redkit.atomic import write_text

STUDY_ORDER = ("noise", "ablation", "seeds", "complexity")  # others follow, by name

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; max-width: 1180px; margin: 2em auto; padding: 0 1.5em; color: #1b1b1b; }
h1 { border-bottom: 2px solid #333; padding-bottom: .2em; margin-top: 2.2em; }
h2 { margin-top: 1.8em; border-bottom: 1px solid #ccc; } h3 { margin-top: 1.4em; }
table { border-collapse: collapse; margin: .8em 0; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: right; }
th { background: #f1f1f1; } td:first-child, th:first-child { text-align: left; }
tr:nth-child(even) td { background: #fafafa; }
img { max-width: 100%; border: 1px solid #ddd; margin: .5em 0; }
code { background: #f3f3f3; padding: 0 .25em; }
nav { background: #f6f6f6; padding: .6em 1em; border: 1px solid #ddd; }
nav a { margin-right: 1.2em; }
"""


def _inline_images(body: str, base: Path) -> str:
    """Replace src="figures/x.png" (relative to `base`) with the PNG's bytes as a data URI."""

    def data_uri(match: re.Match) -> str:
        path = base / html.unescape(match.group(1))
        if not path.is_file():
            return match.group(0)  # left as is: the test that decodes every image then fails loudly
        return f'src="data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()}"'

    return re.sub(r'src="([^":]+\.png)"', data_uri, body)


def _markdown(text: str) -> str:
    """A report's markdown as HTML, with all of its text shown as text: labels, domains and paths are
    someone else's, so raw HTML is escaped (a label `<script>` reads as itself, runs nothing) and no
    link is made (`[x](javascript:...)`). The reports use headings, tables and images, nothing else."""
    md = markdown.Markdown(extensions=["tables"])
    md.preprocessors.deregister("html_block")
    for pattern in ("html", "link", "reference", "short_reference", "autolink", "automail"):
        md.inlinePatterns.deregister(pattern)
    return md.convert(text)


def report_sections(run_dir: Path) -> list[tuple[str, Path]]:
    """(anchor, report.md) of the run, of each study and of each analysis (`analysis/<name>/`,
    e.g. `redkit analyze routing`), in reading order."""
    run_dir = Path(run_dir)
    sections = [("run", run_dir / "report.md")] if (run_dir / "report.md").is_file() else []
    studies = sorted(
        (run_dir / "studies").glob("*/report.md"),
        key=lambda p: (
            STUDY_ORDER.index(p.parent.name) if p.parent.name in STUDY_ORDER else len(STUDY_ORDER),
            p.parent.name,
        ),
    )
    analyses = sorted((run_dir / "analysis").glob("*/report.md"))
    return (
        sections
        + [(path.parent.name, path) for path in studies]
        + [(f"analysis-{path.parent.name}", path) for path in analyses]
    )


def write_html_report(run_dir: Path) -> Path:
    run_dir = Path(run_dir)
    sections = report_sections(run_dir)
    nav = " ".join(f'<a href="#{html.escape(anchor)}">{html.escape(anchor)}</a>' for anchor, _ in sections)
    parts = []
    for anchor, path in sections:
        body = _markdown(path.read_text(encoding="utf-8"))
        parts.append(f'<section id="{html.escape(anchor)}">\n{_inline_images(body, path.parent)}\n</section>')
    page = (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>redkit — {html.escape(run_dir.name)}</title><style>{STYLE}</style></head>\n"
        f"<body><nav><strong>{html.escape(str(run_dir))}</strong> — {nav}</nav>\n"
        + "\n".join(parts)
        + "\n</body></html>\n"
    )
    out = run_dir / "report.html"
    write_text(out, page)
    return out
