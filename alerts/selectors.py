"""Rewriting each series selector of a rule's expression: the dashboards add their
variables' matchers (dashboards/rules.py), `rigctl report` its rig's and inlines the
recorded series (exporter/rigctl/report/rules.py). One scanner for both, so both read
the generated expressions the same way.

It knows the generator's PromQL, not all PromQL: names are scanned outside strings and
label lists, a name followed by "(" is a function, and keywords are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "bool", "offset", "inf", "nan", "sum", "min", "max", "avg", "count", "group", "stddev",
    "stdvar", "topk", "bottomk", "quantile", "count_values",
}
# A name (metric or recorded series) not part of another token, its {...}, and not a
# function (a name followed by "(").
_SELECTOR = re.compile(r"(?<![\w:$.])([a-zA-Z_]\w*(?::\w+)*)(?![\w:])\s*(\{[^}]*\})?(?!\s*\()")
_MATCHER = re.compile(r'\w+\s*(?:=~|!~|!=|=)\s*"[^"]*"')
_LABEL_LISTS = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")


def _blank(text: str, pattern: str | re.Pattern[str]) -> str:
    return re.sub(pattern, lambda m: " " * len(m.group(0)), text)


def rewrite_selectors(expr: str, selector: Callable[[str, list[str]], str]) -> str:
    """`expr` with each selector replaced by `selector(name, its matchers)`, on one line."""
    masked = _blank(_blank(expr, r'"[^"]*"'), _LABEL_LISTS)
    out, last = [], 0
    for match in _SELECTOR.finditer(masked):
        name = match.group(1)
        if name.lower() in _KEYWORDS:
            continue
        braces = expr[match.start(2):match.end(2)] if match.group(2) else ""
        out += [expr[last:match.start()], selector(name, _MATCHER.findall(braces))]
        last = match.end(2) if match.group(2) else match.end(1)
    return " ".join("".join([*out, expr[last:]]).split())
