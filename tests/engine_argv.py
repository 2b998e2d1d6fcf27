"""What the engine argument checks share (tests/vllm_argv_check.py, tests/sglang_argv_check.py).

Each check runs under its engine's own Python (standard library only here: this file sits beside
the check, on its path): it reads a JSON list of ``{"id": ..., "argv": [...]}`` on stdin and writes
``{"checked", "refused": [{"id", "error"}], "skew": {id: [flags]}}``. ``error`` is the engine's own
argparse message (the unknown flag or the bad value); a refusal naming one of the ``--skew`` flags
(written by recipes for another version of the engine) takes that flag and its values out and
parses again, so every other flag of the command is still checked, and ``skew`` lists what was
taken out. With ``--list-dynamo-flags`` it prints instead, run by Dynamo's Python, the flags
Dynamo's worker parses itself (``{flag: nargs}``), which the check is then given as
``--dynamo-flags``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
from collections.abc import Callable


class Refused(Exception):
    pass


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``parser``'s namespace for ``argv``; Refused with argparse's own last line when it refuses."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parser.parse_args(argv)
    except SystemExit:
        raise Refused(err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else "argparse exited")
    except argparse.ArgumentError as e:
        raise Refused(str(e))


def nargs_of(parser: argparse.ArgumentParser, skip: tuple[str, ...] = ("-h", "--help")) -> dict[str, str]:
    """Every option of ``parser`` -> how many values it takes ("0", "1" or "?")."""
    nargs = {0: "0", None: "1", "?": "?"}
    return {o: nargs.get(a.nargs, "1") for a in parser._actions for o in a.option_strings if o not in skip}


def strip(argv: list[str], owned: dict[str, str]) -> list[str]:
    """``argv`` without the flags (and their values) that ``owned`` names: flag -> how many values
    it takes ("0", "1", "?": one if the next word is no flag, "+": every word up to the next flag)."""
    out, i = [], 0
    while i < len(argv):
        flag, eq, _ = argv[i].partition("=")
        if flag in owned:
            takes = owned[flag]
            i += 1
            if takes == "+":  # every value up to the next flag (--cuda-graph-bs 1 2 4 ...)
                while not eq and i < len(argv) and not argv[i].startswith("--"):
                    i += 1
                continue
            has_value = i < len(argv) and not argv[i].startswith("--")
            i += 0 if eq or takes == "0" or (takes == "?" and not has_value) else 1
            continue
        out.append(argv[i])
        i += 1
    return out


_NAMED = re.compile(r"unrecognized arguments: (--[\w-]+)|argument (--[\w-]+)|ambiguous option: (--[\w-]+)")

# (argv, Dynamo's flags): returns when the engine accepts the command, raises Refused (or the
# ValueError / TypeError of the engine's own validation) when it does not
Check = Callable[[list[str], dict[str, str]], None]


def _error(check_argv: Check, argv: list[str], dynamo: dict[str, str]) -> str | None:
    try:
        check_argv(argv, dynamo)
    except Refused as e:
        return str(e)
    except (ValueError, TypeError) as e:
        return f"{type(e).__name__}: {e}"
    return None


def check(item: dict, check_argv: Check, dynamo: dict[str, str], skew: frozenset[str], taken: list[str]) -> str | None:
    """None if the engine accepts ``item``'s argv once the ``skew`` flags it refuses are taken out
    (appended to ``taken``); otherwise the engine's message."""
    error = _error(check_argv, item["argv"], dynamo)
    m = _NAMED.search(error or "")
    flag = next((g for g in m.groups() if g), None) if m else None
    if flag in skew and flag not in taken:
        taken.append(flag)
        return check({**item, "argv": strip(item["argv"], {flag: "+"})}, check_argv, dynamo, skew, taken)
    return error


def main(check_argv: Check, dynamo_flags: Callable[[], dict[str, str]]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dynamo-flags", default="{}", help="JSON {flag: nargs} Dynamo's parser owns")
    p.add_argument("--list-dynamo-flags", action="store_true", help="print that JSON (run by Dynamo's Python)")
    p.add_argument("--skew", default="[]", help="JSON list of flags recipes write for another version")
    a = p.parse_args()
    if a.list_dynamo_flags:
        json.dump(dynamo_flags(), sys.stdout)
        return
    items = json.load(sys.stdin)
    dyn, skew = json.loads(a.dynamo_flags), frozenset(json.loads(a.skew))
    refused, skewed = [], {}
    for it in items:
        taken: list[str] = []
        if e := check(it, check_argv, dyn, skew, taken):
            refused.append({"id": it["id"], "error": e})
        if taken:
            skewed[it["id"]] = taken
    json.dump({"checked": len(items), "refused": refused, "skew": skewed}, sys.stdout)
