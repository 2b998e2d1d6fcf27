"""Log patterns (``readiness.log.pattern``, fatal log patterns), matched in linear time.

A recipe's pattern is matched against every line its worker prints, inside the tick. With a
backtracking engine (Python's ``re``) no syntactic check catches every slow pattern:
``(a|aa)+b`` passed one, and a service printing 36 ``a``s stopped the loop for 30 s (the status
page and metrics with it; ~45 characters means hours). RE2, through Google's own binding
(``google-re2``), runs an automaton: time linear in the line whatever the pattern. What RE2 cannot
do in linear time (backreferences, lookaround) it refuses to compile, and so do we, when the
recipe is loaded, at its key.
"""

from __future__ import annotations

import functools

import re2

# RE2 writes every refused pattern to stderr through absl; the reason comes back in the exception
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False


class PatternError(ValueError):
    pass


@functools.lru_cache(maxsize=4096)  # the same few patterns are asked for each unit each tick
def compile_pattern(pattern: str) -> re2._Regexp:
    """The pattern compiled by RE2; PatternError (why, in words) when RE2 cannot match it."""
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as e:
        why = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise PatternError(f"{pattern!r} cannot be matched in linear time ({why}): log patterns are RE2 "
                           "syntax, without backreferences or lookaround") from None

