"""``reconciler keys``: the lines of a gateway's API keys file (``reconcile.gateway.api_keys``).

The key is read from stdin, never taken as an argument: a process's argv is readable by every
user of the host (``/proc/<pid>/cmdline``) and lands in shell history.
"""

from __future__ import annotations

import sys

import click

from reconciler.gateway.keys import KeysError, line_for, new_key, read


@click.group()
def keys() -> None:
    """Make and check the lines of a gateway's API keys file (reconcile.gateway.api_keys)."""


@keys.command("hash")
@click.option("--label", default=None, help="A name for the key, kept on its line (who holds it).")
def hash_cmd(label: str | None) -> None:
    """Print the keys-file line of the key read from stdin (one line): 'sha256:<hex> [label]'."""
    key = sys.stdin.readline().rstrip("\r\n")
    try:
        click.echo(line_for(key, label))
    except KeysError as e:
        raise click.ClickException(str(e)) from None


@keys.command("new")
@click.option("--label", default=None, help="A name for the key, kept on its line (who holds it).")
def new_cmd(label: str | None) -> None:
    """Make a random key: the key on stderr (give it to its holder), its line on stdout (append it
    to the keys file): `reconciler keys new --label alice >> keys`."""
    key = new_key()
    try:
        line = line_for(key, label)
    except KeysError as e:
        raise click.ClickException(str(e)) from None
    click.echo(f"key: {key}", err=True)
    click.echo(line)


@keys.command("check")
@click.argument("path", type=click.Path(dir_okay=False))
def check_cmd(path: str) -> None:
    """Read a keys file as the gateway does: how many keys, or the first bad line."""
    from pathlib import Path

    try:
        found = read(Path(path))
    except KeysError as e:
        raise click.ClickException(str(e)) from None
    click.echo(f"{path}: {len(found)} key(s)")
