"""Folders are namespaces: a deployment's identity is its folder under manifests/ plus its name.

A GitOps repository organised like NVIDIA's recipe collection (one folder per model and GPU)
repeats recipe names across folders; like a Kubernetes namespace, the folder tells them
apart. Users write ``FOLDER/NAME`` (``get dsv4/gb300/agg``); inside the reconciler the
identity is one *key* that is safe everywhere a recipe name goes (Slurm labels, state/
directories, port owners, which split on '/'): the folder's parts and the name joined with
``@``, a character recipe names and folder names cannot hold. A recipe at the top of
manifests/ has no namespace and its key is its name, exactly as before namespaces existed, so
what runs keeps its labels, state and ports across the upgrade (no relaunch).
"""

from __future__ import annotations

import re
from pathlib import Path

SEP = "@"  # never in a recipe name (NAME_RE) nor in a namespace part
# a recipe's name (srtctl has no limit; ours keeps paths sane): defined here, not beside the model,
# so that the read commands check a name without importing pydantic and the whole schema
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")
_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# state/<key>/ is one path component (at most 255 bytes on Linux): a longer key failed every pass
# with "File name too long". Labels abbreviate long keys (labels.recipe_tag).
MAX_KEY = 200


class NamespaceError(ValueError):
    pass


def namespace_of_file(root: Path, file: Path) -> str:
    """The namespace of a recipe file under ``root``: its folder relative to it ('' at the top).

    A folder that cannot be a namespace (a space, '@', a leading dot...) is refused with its name,
    so a file in it is Invalid instead of silently sharing another folder's identity."""
    try:
        parts = file.parent.relative_to(root).parts
    except ValueError:
        return ""  # a file named directly (not under a scanned directory): no namespace
    for p in parts:
        if not _PART.fullmatch(p) or ".." in p:
            raise NamespaceError(f"folder {p!r} cannot be a namespace: letters, digits, '-', '_' or '.' "
                                 "(at most 64, starting with a letter or digit)")
    return "/".join(parts)


def key(namespace: str, name: str) -> str:
    """The identity of ``name`` in ``namespace``: the name itself at the top level."""
    return SEP.join([*namespace.split("/"), name]) if namespace else name


def key_error(namespace: str, name: str) -> str | None:
    """Why ``name`` in ``namespace`` cannot be a deployment: a key too long for a directory name."""
    k = key(namespace, name)
    if len(k.encode()) <= MAX_KEY:
        return None
    return (f"folder and name make the key {k[:40]}... of {len(k.encode())} bytes; folder + '@' + name may "
            f"be at most {MAX_KEY} (it names the deployment's directory under state/): shorten the name or the folder")


def split(k: str) -> tuple[str, str]:
    """(namespace, name) of a key."""
    ns, _, name = k.rpartition(SEP)
    return ns.replace(SEP, "/"), name


def display(k: str) -> str:
    """How users write it: ``FOLDER/NAME`` (the name alone at the top level)."""
    ns, name = split(k)
    return f"{ns}/{name}" if ns else name


def from_ref(ref: str) -> str:
    """A user's ``FOLDER/NAME`` (or a key, or a bare name) -> the key."""
    if "/" not in ref:
        return ref
    ns, _, name = ref.strip("/").rpartition("/")
    return key(ns, name)


def is_key(k: str) -> bool:
    """Whether ``k`` is a well-formed key (names: NAME_RE; parts as folders)."""
    if len(k.encode()) > MAX_KEY:
        return False
    ns, name = split(k)
    return bool(NAME_RE.fullmatch(name)) and ".." not in name and all(
        _PART.fullmatch(p) and ".." not in p for p in ns.split("/") if ns)


def fits_state(k: str) -> bool:
    """Whether ``state/<k>/`` may be written as a deployment's directory: a well-formed key that
    is no entry state/ keeps for itself. A file refused for its name is still listed (Invalid) by
    ``get``; nothing is written under a name like ``quarantine.json``."""
    from reconciler.recipe.bounds import reserved

    return is_key(k) and reserved(k) is None
