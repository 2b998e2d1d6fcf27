"""Parse rendered SGLang command lines with SGLang's own argument parser.

Run by the Python of .stacks/vllm with .stacks/sglang-args on its path (tests/test_sglang_argv.py):
the sglang wheel alone, whose ``sglang.srt.server_args`` imports with vLLM's CPU torch beside it.
Its input and output: tests/engine_argv.py; each argv starts at the module
(``sglang.launch_server ...`` or ``dynamo.sglang ...``).

``sglang.launch_server`` is parsed as ``prepare_server_args`` parses it (the parser
``ServerArgs.add_cli_args`` builds, then ``ServerArgs.from_cli_args``); its resolution, which
reads the model and the GPUs, is not run. ``dynamo.sglang`` is Dynamo's parser around SGLang's:
Dynamo 1.6.1 parses its own flags first (its runtime and SGLang groups, the router flags; listed
by Dynamo's own Python with ``--list-dynamo-flags``) and hands the rest to SGLang's parser, with
the one legacy flag Dynamo's ``add_sglang_cli_compat`` adds to it. Nothing is started.
"""

from __future__ import annotations

import argparse
import functools

from engine_argv import Refused, main, nargs_of, parse, strip


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
    """Run by Dynamo's Python: every flag Dynamo's SGLang worker parses itself, from Dynamo's own
    argument groups (dynamo/sglang/args.py:parse_args)."""
    from dynamo.common.configuration.groups.router_args import register_worker_router_help
    from dynamo.common.configuration.groups.runtime_args import DynamoRuntimeArgGroup
    from dynamo.sglang.backend_args import DynamoSGLangArgGroup

    p = argparse.ArgumentParser(allow_abbrev=False)
    DynamoRuntimeArgGroup().add_arguments(p)
    DynamoSGLangArgGroup().add_arguments(p)
    register_worker_router_help(p)
    return nargs_of(p, skip=("-h", "--help", "--version"))


def check_argv(argv: list[str], dynamo: dict[str, str]) -> None:
    from sglang.srt.server_args import ServerArgs

    if argv[0] == "sglang.launch_server":
        ServerArgs.from_cli_args(parse(_parser(False), argv[1:]))
    elif argv[0] == "dynamo.sglang":
        ServerArgs.from_cli_args(parse(_parser(True), strip(argv[1:], dynamo)))
    else:
        raise Refused(f"not an SGLang command: {argv[:3]}")


if __name__ == "__main__":
    main(check_argv, dynamo_flags)
