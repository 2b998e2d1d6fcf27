"""Secrets out of what is shown: values of keys that look like secrets, in a recipe's text and in events.

What counts as a secret's key: one whose words (split at ``_ - .`` and lower/upper case changes)
include token, key, secret, password, passwd, credential(s) or apikey — ``HF_TOKEN``, ``api_key``,
``apiKey``, ``AWS_SECRET_ACCESS_KEY``, ``GOOGLE_APPLICATION_CREDENTIALS`` — and not words that only
contain one (``max_tokens``, ``tokenizer``, ``kv_cache_dtype``). Its value is shown as REDACTED
wherever the reconciler writes the text for people to read (``last-applied.yaml``, events, the
status page, ``describe``); the real text is kept only where a launch needs it (drivers/state.py).

Text, not parsed YAML: the file's comments, order and layout stay as written. The forms caught:
``KEY: value`` (block or flow mapping, quoted or plain), ``KEY=value`` (an env list, a shell line),
and ``--flag value`` / ``--flag=value`` / ``["--flag", "value"]`` for a secret-looking flag; then every
other occurrence of a value so found (an anchor's alias, the same token in a comment).
"""

from __future__ import annotations

import re

REDACTED = "REDACTED"
_WORDS = frozenset({"token", "key", "secret", "secrets", "password", "passwd", "credential", "credentials",
                    "apikey", "pwd"})
_ENDS = ("token", "apikey", "secret", "password", "passwd")  # HFTOKEN, OPENAIAPIKEY: no separator
_MIN_ECHO = 4  # a value shorter than this is not hunted elsewhere in the text (it would match anything)

_KEY = r"[A-Za-z_][A-Za-z0-9_.-]*"
_VALUE = r"""'(?:[^'\n]|'')*'|"(?:[^"\\\n]|\\.)*"|[^\s,{}\[\]#'"][^,{}\[\]\n#]*?"""
# KEY: value, the value up to the end of its line, a comment, or the next flow item
_PAIR = re.compile(rf"""(?P<k>(?<![\w.-]){_KEY})(?P<sep>[ \t]*:[ \t]+)(?P<v>{_VALUE})(?=[ \t]*(?:$|[,}}\]]|\s\#))""",
                   re.MULTILINE)
# KEY=value (an env list item, a shell line, a message): the value up to a blank or a quote's end
_ASSIGN = re.compile(r"""(?P<k>(?<![\w.-])[A-Za-z_][A-Za-z0-9_.-]*)(?P<sep>=)"""
                     r"""(?P<v>'[^'\n]*'|"(?:[^"\\\n]|\\.)*"|[^\s'",}\]&;]+)""")
# --flag value, --flag=value, "--flag", "value" and the block-list form (- --flag / - value)
_FLAG = re.compile(rf"""--(?P<k>{_KEY})(?P<sep>['"]?(?:[ \t]*,[ \t]*|[ \t]*\n[ \t]*-[ \t]+|[ \t]+|=)['"]?)"""
                   r"""(?P<v>[^\s'",\]}]+)""")


def secret_key(key: str) -> bool:
    """Whether ``key`` names a secret (HF_TOKEN, api_key, apiKey; not max_tokens, tokenizer)."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", key)
    words = [w.lower() for w in re.split(r"[\s_.\-]+", spaced) if w]
    if any(w in _WORDS for w in words):
        return True
    flat = "".join(words)
    return flat.endswith(_ENDS)


def _unquote(v: str) -> str:
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
        return v[1:-1]
    return v.rstrip()


def find(text: str, pairs: bool = True) -> set[str]:
    """The secret values ``text`` holds (unquoted), found by their keys (``pairs``: also in the
    ``key: value`` form, a recipe's YAML)."""
    found = set()
    for m in (*(_PAIR.finditer(text) if pairs else ()), *_ASSIGN.finditer(text)):
        if secret_key(m.group("k")) and (v := _unquote(m.group("v"))) and v not in (REDACTED, "''", '""'):
            found.add(v)
    for m in _FLAG.finditer(text):
        if secret_key(m.group("k")) and m.group("v") != REDACTED:
            found.add(m.group("v"))
    return found


def redact(text: str, known: set[str] | frozenset[str] = frozenset(), pairs: bool = True) -> str:
    """``text`` with every secret value replaced by REDACTED: those found by their keys, and any of
    ``known`` (values found earlier, in the recipe an event speaks of). ``pairs``: the ``key: value``
    form too (a recipe's YAML; not a one-line message, where it is a path or an error's name)."""
    values = find(text, pairs) | set(known)
    if not values:
        return text

    def pair(m: re.Match) -> str:
        if not secret_key(m.group("k")) or not _unquote(m.group("v")):
            return m.group(0)
        quote = "'" if m.group("sep").strip().startswith(":") else ""
        return f"{m.group('k')}{m.group('sep')}{quote}{REDACTED}{quote}"

    def flag(m: re.Match) -> str:
        return f"--{m.group('k')}{m.group('sep')}{REDACTED}" if secret_key(m.group("k")) else m.group(0)

    out = _FLAG.sub(flag, _ASSIGN.sub(pair, _PAIR.sub(pair, text) if pairs else text))
    for v in sorted(values, key=len, reverse=True):  # the longest first: one may contain another
        if len(v) >= _MIN_ECHO:
            out = out.replace(v, REDACTED)
    return out



# status.json's free text: where an engine's or Slurm's words may be quoted (a refusal line, an
# error); names, URLs, nodes and hashes are the reconciler's own and are read back as they are
FREE_TEXT = ("error", "warning", "reasonMessage")
ROW_TEXT = ("notReadyReason",)


class StatusRedactor:
    """status.json as people read it (get, describe, the page): its free-text fields carry no value
    of the recipe's own secrets, nor one given as ``KEY=value`` or ``--flag value`` for a secret's
    key. Not the ``key: value`` form: in a one-line message it is a path or an error's name
    (``…/api-key-proxy.yaml: recipe.engine: …``, ``KeyError: 'prefill'``), not YAML. Each recipe's
    answers are remembered for its secrets (the same frozenset until its text changes), so a settled
    status costs a look-up per message."""

    MAX = 256  # remembered answers per recipe (a status has tens of messages; cleared beyond)

    def __init__(self) -> None:
        self._memo: dict[str, tuple[frozenset[str], dict[str, str]]] = {}

    def text(self, name: str, value: str, known: frozenset[str]) -> str:
        seen = self._memo.get(name)
        if seen is None or seen[0] is not known:
            seen = self._memo[name] = (known, {})
        memo = seen[1]
        out = memo.get(value)
        if out is None:
            if len(memo) >= self.MAX:
                memo.clear()
            out = memo[value] = redact(value, known, pairs=False)
        return out

    def __call__(self, name: str, status: dict, known: frozenset[str] = frozenset()) -> dict:
        out = status
        for k in FREE_TEXT:
            if isinstance(v := status.get(k), str) and (r := self.text(name, v, known)) != v:
                out = {**out, k: r}
        conds = status.get("conditions")
        if isinstance(conds, list):
            shown = [_swap(c, ("message",), lambda v: self.text(name, v, known)) for c in conds]
            if any(a is not b for a, b in zip(shown, conds)):
                out = {**out, "conditions": shown}
        rows = status.get("workers")
        if isinstance(rows, list):
            shown = [_swap(r, ROW_TEXT, lambda v: self.text(name, v, known)) for r in rows]
            if any(a is not b for a, b in zip(shown, rows)):
                out = {**out, "workers": shown}
        return out


def _swap(d, keys: tuple[str, ...], shown) -> dict:
    """``d`` with its string ``keys`` as ``shown`` gives them: ``d`` itself when none changes."""
    if not isinstance(d, dict):
        return d
    out = d
    for k in keys:
        if isinstance(v := d.get(k), str) and (r := shown(v)) != v:
            out = {**out, k: r}
    return out
