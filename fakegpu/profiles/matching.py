"""Name normalisation, "did you mean" ranking, and the one-line hint every unknown-name error ends with.

The distance is an optimal-string-alignment edit distance in which swapping look-alike characters
(O/0, l/1, I/1, S/5, B/8) costs half, so a typo like 'a10O' ranks 'a100' above 'a10'.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

_CONFUSABLE = {frozenset(p) for p in ("o0", "l1", "i1", "s5", "b8", "z2")}
_SEPARATORS = re.compile(r"[\s_]+")


def normalise(name: str) -> str:
    """Lower case, runs of spaces/underscores as '-', and the vendor prefix dropped."""
    key = _SEPARATORS.sub("-", name.strip().lower())
    return key.removeprefix("nvidia-")


def _cost(a: str, b: str) -> float:
    if a == b:
        return 0.0
    return 0.5 if frozenset((a, b)) in _CONFUSABLE else 1.0


def distance(a: str, b: str) -> float:
    rows = [[float(j) for j in range(len(b) + 1)]]
    for i in range(1, len(a) + 1):
        row = [float(i)] + [0.0] * len(b)
        for j in range(1, len(b) + 1):
            row[j] = min(rows[i - 1][j] + 1, row[j - 1] + 1, rows[i - 1][j - 1] + _cost(a[i - 1], b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], rows[i - 2][j - 2] + 1)
        rows.append(row)
    return rows[-1][-1]


def closest(name: str, candidates: list[str], limit: int = 3) -> list[str]:
    """Up to `limit` candidates near `name`, best first; none when nothing is plausibly meant."""
    key = normalise(name)
    if not key:
        return []
    budget = max(1.0, len(key) / 3)
    # The distance is at least the difference in length, so candidates far off in length are skipped unscored:
    # a hostile 1 MB name costs a length comparison per candidate, not an edit distance.
    scored = sorted((distance(key, c), len(c), c) for c in candidates if abs(len(key) - len(c)) <= budget)
    return [c for d, _, c in scored if d <= budget][:limit]


def suggestion_hint(suggestions: Sequence[str], *, quote: bool = True, paren: bool = True) -> str:
    """The "did you mean" hint for names already ranked, "" for none; several are offered as "x or y".

    `paren` gives " (did you mean 'x'?)", for a hint followed by "; accepted: ..."; else "; did you mean 'x'?",
    for one that ends the message or is followed by a parenthesis of its own. `quote` shows each name as repr:
    bare names read better where the message lists the accepted ones bare too.
    """
    if not suggestions:
        return ""
    meant = " or ".join(repr(s) if quote else s for s in suggestions)
    return f" (did you mean {meant}?)" if paren else f"; did you mean {meant}?"


def did_you_mean(name: str, candidates: Iterable[str], *, limit: int = 1, quote: bool = True, paren: bool = True,
                 shown: Mapping[str, str] | None = None) -> str:
    """The hint naming up to `limit` candidates close to `name` (see suggestion_hint), "" when none is.

    Candidates are compared normalised, as `name` is, so a mistyped upper-case UUID or 'exit_cod' still finds
    its match, and each is suggested as given, or as `shown` maps it (an alias as the name it stands for).
    """
    display: dict[str, str] = {}
    for c in candidates:
        display.setdefault(normalise(c), shown[c] if shown is not None and c in shown else c)
    return suggestion_hint([display[k] for k in closest(name, list(display), limit)], quote=quote, paren=paren)
