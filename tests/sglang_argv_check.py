"""Parse rendered SGLang command lines with SGLang's own argument parser.

Run by the Python of .stacks/vllm with .stacks/sglang-args on its path (tests/test_sglang_argv.py):
the sglang wheel alone, whose ``sglang.srt.server_args`` imports with vLLM's CPU torch beside it.
Reads a JSON list of ``{"id": ..., "argv": [...]}`` on stdin (each argv starts at the module:
``sglang.launch_server ...`` or ``dynamo.sglang ...``), writes ``{"checked", "refused": [{"id",
"error"}], "skew": {id: [flags]}}``: ``error`` is argparse's own message (the unknown flag or the
bad value); a refusal naming one of the ``--skew`` flags (written by recipes for another SGLang)
takes that flag and its value out and parses again, so every other flag is still checked.

``sglang.launch_server`` is parsed as ``prepare_server_args`` parses it (the parser
``ServerArgs.add_cli_args`` builds, then ``ServerArgs.from_cli_args``); its resolution, which
reads the model and the GPUs, is not run. ``dynamo.sglang`` is Dynamo's parser around SGLang's:
Dynamo 1.6.1 parses its own flags first (its runtime and SGLang groups, the router flags; listed
by Dynamo's own Python with ``--list-dynamo-flags``) and hands the rest to SGLang's parser, with
the one legacy flag Dynamo's ``add_sglang_cli_compat`` adds to it. Nothing is started.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import re
import sys


class Refused(Exception):
    pass


@functools.cache  # every SGLang argument: building it takes a while, parsing does not change it
def _parser(dynamo: bool) -> argparse.ArgumentParser:
    from sglang.srt.server_args import ServerArgs

    p = argparse.ArgumentParser(prog="dynamo.sglang (SGLang's arguments)" if dynamo else "sglang serve",
                                exit_on_error=False)
    ServerArgs.add_cli_args(p)
    options = p._option_string_actions
    if dynamo and "--disable-piecewise-cuda-graph" not in options and "--cuda-graph-backend-prefill" in options:
        # Dynamo 1.6.1's dynamo/sglang/_compat.py:add_sglang_cli_compat, for SGLang >= 0.5.20
        p.add_argument("--disable-piecewise-cuda-graph", dest="cuda_graph_backend_prefill",
                       action="store_const", const="disabled", default=argparse.SUPPRESS)
    return p


def dynamo_flags() -> dict[str, str]:
    """Run by Dynamo's Python: every flag Dynamo's SGLang worker parses itself -> its nargs
    ("0", "1" or "?"), from Dynamo's own argument groups (dynamo/sglang/args.py:parse_args)."""
    from dynamo.common.configuration.groups.router_args import register_worker_router_help
    from dynamo.common.configuration.groups.runtime_args import DynamoRuntimeArgGroup
    from dynamo.sglang.backend_args import DynamoSGLangArgGroup

    p = argparse.ArgumentParser(allow_abbrev=False)
    DynamoRuntimeArgGroup().add_arguments(p)
    DynamoSGLangArgGroup().add_arguments(p)
    register_worker_router_help(p)
    nargs = {0: "0", None: "1", "?": "?"}
    return {o: nargs.get(a.nargs, "1") for a in p._actions for o in a.option_strings
            if o not in ("-h", "--help", "--version")}


def _strip(argv: list[str], owned: dict[str, str]) -> list[str]:
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


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parser.parse_args(argv)
    except SystemExit:
        raise Refused(err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else "argparse exited")
    except argparse.ArgumentError as e:
        raise Refused(str(e))


def _check(argv: list[str], dynamo: dict[str, str]) -> str | None:
    from sglang.srt.server_args import ServerArgs

    try:
        if argv[0] == "sglang.launch_server":
            ServerArgs.from_cli_args(_parse(_parser(False), argv[1:]))
        elif argv[0] == "dynamo.sglang":
            ServerArgs.from_cli_args(_parse(_parser(True), _strip(argv[1:], dynamo)))
        else:
            return f"not an SGLang command: {argv[:3]}"
    except Refused as e:
        return str(e)
    except (ValueError, TypeError) as e:
        return f"{type(e).__name__}: {e}"
    return None


_NAMED = re.compile(r"unrecognized arguments: (--[\w-]+)|argument (--[\w-]+)|ambiguous option: (--[\w-]+)")


def check(item: dict, dynamo: dict[str, str], skew: frozenset[str], taken: list[str]) -> str | None:
    """None if SGLang accepts ``item``'s argv once the ``skew`` flags it refuses are taken out
    (appended to ``taken``); otherwise SGLang's message."""
    error = _check(item["argv"], dynamo)
    m = _NAMED.search(error or "")
    flag = next((g for g in m.groups() if g), None) if m else None
    if flag in skew and flag not in taken:
        taken.append(flag)
        return check({**item, "argv": _strip(item["argv"], {flag: "+"})}, dynamo, skew, taken)
    return error


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dynamo-flags", default="{}", help="JSON {flag: nargs} Dynamo's parser owns")
    p.add_argument("--list-dynamo-flags", action="store_true", help="print that JSON (run by Dynamo's Python)")
    p.add_argument("--skew", default="[]", help="JSON list of flags recipes write for another SGLang")
    a = p.parse_args()
    if a.list_dynamo_flags:
        json.dump(dynamo_flags(), sys.stdout)
        return
    items = json.load(sys.stdin)
    dyn, skew = json.loads(a.dynamo_flags), frozenset(json.loads(a.skew))
    refused, skewed = [], {}
    for it in items:
        taken: list[str] = []
        if e := check(it, dyn, skew, taken):
            refused.append({"id": it["id"], "error": e})
        if taken:
            skewed[it["id"]] = taken
    json.dump({"checked": len(items), "refused": refused, "skew": skewed}, sys.stdout)


if __name__ == "__main__":
    main()
