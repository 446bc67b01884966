"""bench markdown: how long a model answer takes to render (lib/markdown.render: markdown-it-py,
Pygments for code, nh3 to sanitize), and its parts, timed in the same run on the same text."""

from __future__ import annotations

import statistics
import time

from lib import markdown

BLOCK = ("## Part\n\nSome **bold** text with a [link](https://example.org) and `code`.\n\n"
         "- an item\n- another item\n\n| a | b |\n|---|--:|\n| 1 | 2 |\n\n"
         "```python\nfor i in range(10):\n    print(i * 2)\n```\n\n")


def answer(size: int) -> str:
    """A Markdown answer of `size` characters: headings, emphasis, links, lists, a table, code."""
    return (BLOCK * (size // len(BLOCK) + 1))[:size]


def _times(fn, text: str, repeat: int) -> list[float]:
    fn(text)  # warm the parser and the lexers
    runs = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn(text)
        runs.append(time.perf_counter() - started)
    return runs


def run_markdown_bench(size: int = 20_000, repeat: int = 20, out=print) -> dict:
    text = answer(size)
    unsanitized = markdown._parser().render(text)
    stages = {  # (what is timed, its input)
        "parse_only": (lambda t: markdown._parser().parse(t), text),  # the tokens, nothing rendered
        "to_html": (lambda t: markdown._parser().render(t), text),  # HTML with highlighted code
        "sanitize_only": (markdown.sanitize, unsanitized),  # nh3 over that HTML
        "render": (markdown.render, text),  # what the site serves: all of the above
    }
    summary: dict = {"characters": len(text), "repeat": repeat}
    out(f"Rendering a {len(text):,}-character Markdown answer, {repeat} timed runs per stage:")
    out(f"{'stage':<20} {'best ms':>9} {'median ms':>10} {'p95 ms':>8}")
    for name, (fn, given) in stages.items():
        runs = sorted(_times(fn, given, repeat))
        best, median = runs[0] * 1000, statistics.median(runs) * 1000
        p95 = runs[min(len(runs) - 1, round(0.95 * (len(runs) - 1)))] * 1000
        out(f"{name:<20} {best:>9.1f} {median:>10.1f} {p95:>8.1f}")
        summary[f"{name}_best_ms"], summary[f"{name}_median_ms"] = round(best, 2), round(median, 2)
    summary["render_kb_per_s"] = round(len(text) / 1024 / (summary["render_median_ms"] / 1000), 1)
    return summary
