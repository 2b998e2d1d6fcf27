"""Parse rendered vLLM command lines with the installed vLLM's own argument parser.

Run by the Python of .stacks/vllm (tests/test_vllm_argv.py): reads a JSON list of
``{"id": ..., "argv": [...]}`` on stdin, writes ``{"checked", "refused": [{"id", "error"}],
"skew": {id: [flags]}}``: ``error`` is argparse's own message (the unknown flag or the bad
value); a refusal naming one of the ``--skew`` flags (known to be written by recipes for an
older vLLM) takes that flag and its value out and parses again, so every other flag of the
command is still checked, and ``skew`` lists what was taken out. Nothing is started: the parser is the one ``vllm serve`` builds, and the parsed
namespace goes through vLLM's own serve-argument validation and ``AsyncEngineArgs``.

``vllm serve MODEL ...`` is parsed whole. ``python -m dynamo.vllm ...`` is Dynamo's
parser around vLLM's engine arguments; Dynamo 1.6.1's vLLM component cannot import
against this vLLM (docs/backends.md), so the flags Dynamo's parser owns (given on the
command line as ``--dynamo-flags`` JSON, which ``--list-dynamo-flags`` prints when run by
Dynamo's own Python) are taken out and the rest is parsed as
vLLM's ``AsyncEngineArgs``, as Dynamo itself hands it over.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import functools
import io
import json
import sys


class Refused(Exception):
    pass


@functools.cache  # building one takes seconds (every engine argument); parsing does not change it
def _serve_parser():
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    top = FlexibleArgumentParser(prog="vllm", exit_on_error=False)
    sub = top.add_subparsers(dest="subparser")
    ServeSubcommand().subparser_init(sub)
    return top


@functools.cache
def _engine_parser():
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    p = FlexibleArgumentParser(prog="dynamo.vllm (vLLM's engine arguments)", exit_on_error=False)
    return AsyncEngineArgs.add_cli_args(p)


def _parse(parser, argv: list[str]) -> argparse.Namespace:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parser.parse_args(argv)
    except SystemExit:
        raise Refused(err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else "argparse exited")
    except argparse.ArgumentError as e:
        raise Refused(str(e))


def dynamo_flags() -> dict[str, str]:
    """Run by Dynamo's Python: every flag Dynamo's vLLM worker parser owns -> its nargs
    ("0", "1" or "?"), from Dynamo's own argument groups (dynamo/vllm/args.py builds them so)."""
    from dynamo.common.configuration.groups.router_args import register_worker_router_help
    from dynamo.common.configuration.groups.runtime_args import DynamoRuntimeArgGroup
    from dynamo.vllm.backend_args import DynamoVllmArgGroup

    p = argparse.ArgumentParser(allow_abbrev=False)
    DynamoRuntimeArgGroup().add_arguments(p)
    DynamoVllmArgGroup().add_arguments(p)
    register_worker_router_help(p)
    nargs = {0: "0", None: "1", "?": "?"}
    return {o: nargs.get(a.nargs, "1") for a in p._actions for o in a.option_strings if o not in ("-h", "--help")}


def _strip(argv: list[str], owned: dict[str, str]) -> list[str]:
    """``argv`` without the flags (and their values) Dynamo's own parser owns."""
    out, i = [], 0
    while i < len(argv):
        flag, eq, _ = argv[i].partition("=")
        if flag in owned:
            takes = owned[flag]
            has_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
            i += 1 + (0 if eq or takes == "0" or (takes == "?" and not has_value) else 1)
            continue
        out.append(argv[i])
        i += 1
    return out


_NAMED = re.compile(r"unrecognized arguments: (--[\w-]+)|argument (--[\w-]+)")


def check(item: dict, dynamo_flags: dict[str, str], skew: frozenset[str] = frozenset(),
          taken: list[str] | None = None) -> str | None:
    """None if vLLM accepts ``item``'s argv once the ``skew`` flags it refuses are taken out
    (appended to ``taken``); otherwise vLLM's message."""
    error = _check(item["argv"], dynamo_flags)
    m = _NAMED.search(error or "")
    flag = next((g for g in m.groups() if g), None) if m else None
    if flag in skew and taken is not None and flag not in taken:
        taken.append(flag)
        return check({**item, "argv": _strip(item["argv"], {flag: "?"})}, dynamo_flags, skew, taken)
    return error


def _check(argv: list[str], dynamo_flags: dict[str, str]) -> str | None:
    try:
        if "serve" in argv[:2]:
            from vllm.engine.arg_utils import AsyncEngineArgs
            from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args

            ns = _parse(_serve_parser(), argv[argv.index("serve"):])
            if getattr(ns, "model_tag", None):
                ns.model = ns.model_tag
            validate_parsed_serve_args(ns)
            AsyncEngineArgs.from_cli_args(ns)
        elif "dynamo.vllm" in argv:
            from vllm.engine.arg_utils import AsyncEngineArgs

            rest = _strip(argv[argv.index("dynamo.vllm") + 1:], dynamo_flags)
            AsyncEngineArgs.from_cli_args(_parse(_engine_parser(), rest))
        else:
            return f"not a vLLM command: {argv[:3]}"
    except Refused as e:
        return str(e)
    except (ValueError, TypeError) as e:
        return f"{type(e).__name__}: {e}"
    return None


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dynamo-flags", default="{}", help="JSON {flag: nargs} Dynamo's parser owns")
    p.add_argument("--list-dynamo-flags", action="store_true", help="print that JSON (run by Dynamo's Python)")
    p.add_argument("--skew", default="[]", help="JSON list of flags recipes write for an older vLLM")
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
