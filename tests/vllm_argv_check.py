"""Parse rendered vLLM command lines with the installed vLLM's own argument parser.

Run by the Python of .stacks/vllm (tests/test_vllm_argv.py); its input and output:
tests/engine_argv.py. Nothing is started: the parser is the one ``vllm serve`` builds, and the
parsed namespace goes through vLLM's own serve-argument validation and ``AsyncEngineArgs``.

``vllm serve MODEL ...`` is parsed whole. ``python -m dynamo.vllm ...`` is Dynamo's
parser around vLLM's engine arguments; Dynamo 1.6.1's vLLM component cannot import
against this vLLM (docs/backends.md), so the flags Dynamo's parser owns (given on the
command line as ``--dynamo-flags`` JSON, which ``--list-dynamo-flags`` prints when run by
Dynamo's own Python) are taken out and the rest is parsed as
vLLM's ``AsyncEngineArgs``, as Dynamo itself hands it over.
"""

from __future__ import annotations

import argparse
import functools

from engine_argv import Refused, main, nargs_of, parse, strip


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


def dynamo_flags() -> dict[str, str]:
    """Run by Dynamo's Python: every flag Dynamo's vLLM worker parser owns, from Dynamo's own
    argument groups (dynamo/vllm/args.py builds them so)."""
    from dynamo.common.configuration.groups.router_args import register_worker_router_help
    from dynamo.common.configuration.groups.runtime_args import DynamoRuntimeArgGroup
    from dynamo.vllm.backend_args import DynamoVllmArgGroup

    p = argparse.ArgumentParser(allow_abbrev=False)
    DynamoRuntimeArgGroup().add_arguments(p)
    DynamoVllmArgGroup().add_arguments(p)
    register_worker_router_help(p)
    return nargs_of(p)


def check_argv(argv: list[str], dynamo_flags: dict[str, str]) -> None:
    from vllm.engine.arg_utils import AsyncEngineArgs

    if "serve" in argv[:2]:
        from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args

        ns = parse(_serve_parser(), argv[argv.index("serve"):])
        if getattr(ns, "model_tag", None):
            ns.model = ns.model_tag
        validate_parsed_serve_args(ns)
        AsyncEngineArgs.from_cli_args(ns)
    elif "dynamo.vllm" in argv:
        rest = strip(argv[argv.index("dynamo.vllm") + 1:], dynamo_flags)
        AsyncEngineArgs.from_cli_args(parse(_engine_parser(), rest))
    else:
        raise Refused(f"not a vLLM command: {argv[:3]}")


if __name__ == "__main__":
    main(check_argv, dynamo_flags)
