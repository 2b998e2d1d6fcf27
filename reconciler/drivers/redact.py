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


def find(text: str) -> set[str]:
    """The secret values ``text`` holds (unquoted), found by their keys."""
    found = set()
    for m in (*_PAIR.finditer(text), *_ASSIGN.finditer(text)):
        if secret_key(m.group("k")) and (v := _unquote(m.group("v"))) and v not in (REDACTED, "''", '""'):
            found.add(v)
    for m in _FLAG.finditer(text):
        if secret_key(m.group("k")) and m.group("v") != REDACTED:
            found.add(m.group("v"))
    return found


def redact(text: str, known: set[str] | frozenset[str] = frozenset()) -> str:
    """``text`` with every secret value replaced by REDACTED: those found by their keys, and any of
    ``known`` (values found earlier, in the recipe an event speaks of)."""
    values = find(text) | set(known)
    if not values:
        return text

    def pair(m: re.Match) -> str:
        if not secret_key(m.group("k")) or not _unquote(m.group("v")):
            return m.group(0)
        quote = "'" if m.group("sep").strip().startswith(":") else ""
        return f"{m.group('k')}{m.group('sep')}{quote}{REDACTED}{quote}"

    def flag(m: re.Match) -> str:
        return f"--{m.group('k')}{m.group('sep')}{REDACTED}" if secret_key(m.group("k")) else m.group(0)

    out = _FLAG.sub(flag, _ASSIGN.sub(pair, _PAIR.sub(pair, text)))
    for v in sorted(values, key=len, reverse=True):  # the longest first: one may contain another
        if len(v) >= _MIN_ECHO:
            out = out.replace(v, REDACTED)
    return out


class Shown:
    """Every string in a JSON-like value redacted (status.json: a condition's message may quote an
    engine's refusal line or a flag). Remembers each string's answer for the same secrets, so a
    settled status written every pass costs a dict look-up per string, not three regex scans."""

    MAX = 4096  # strings remembered (a status has tens; cleared, not grown, beyond)

    def __init__(self) -> None:
        self._said: dict[tuple[str, frozenset[str]], str] = {}

    def __call__(self, value, known: frozenset[str] = frozenset()):
        if isinstance(value, str):
            key = (value, known)
            out = self._said.get(key)
            if out is None:
                if len(self._said) >= self.MAX:
                    self._said.clear()
                out = self._said[key] = redact(value, known)
            return out
        if isinstance(value, dict):
            return {k: self(v, known) for k, v in value.items()}
        if isinstance(value, list):
            return [self(v, known) for v in value]
        return value
