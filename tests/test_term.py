"""Terminal output is text, never a command to the terminal (issue 48, item 8): an escape sequence in
a file name, a recipe's value or an event reaches `get`, `describe`, `events` and the errors shown
escaped. The commands run in-process (click's runner, with colours as on a terminal) on the local
driver: nothing is launched by a read command."""

from __future__ import annotations

import json

from click.testing import CliRunner

from reconciler.cli import cli
from reconciler.cli.term import clean, shown

OSC = "\x1b]0;PWNED\x07"  # sets the terminal's title
CLEAR = "\x1b[2J"  # clears the screen
GOOD = 'name: ok\nmodel: {{path: "{model}"}}\nengine: mocker\nroles: {{agg: {{workers: 1, gpus: 1}}}}\n'


def test_shown_escapes_what_steers_a_terminal_and_keeps_the_rest():
    assert shown(f"a{OSC}b{CLEAR}c\x9b1m\u202eevil") == "a\\x1b]0;PWNED\\x07b\\x1b[2Jc\\x9b1m\\u202eevil"
    assert shown("line one\n\tline two — ü") == "line one\n\tline two — ü"
    assert clean({"k\x1b": ["v\x07", ("t\r",), 3]}) == {"k\\x1b": ["v\\x07", ("t\\x0d",), 3]}


def _run(tmp_path, *args: str):
    r = CliRunner().invoke(cli, [*args, "--manifests", str(tmp_path / "m"), "--state", str(tmp_path / "st"),
                                 "--driver", "local"], color=True)
    return r.output + (r.stderr if r.stderr_bytes is not None else "")


def _files(tmp_path) -> None:
    m = tmp_path / "m"
    m.mkdir()
    (m / f"ok{OSC}.yaml").write_text(GOOD.format(model=f"mo\\e]0;PWNED\\adel"))  # YAML's \e is ESC
    (m / f"c{CLEAR}d.yaml").write_text("name: x\nmodel: {path: m}\nengine: [\n")  # invalid: named by its file


def test_get_shows_escape_sequences_in_file_names_escaped(tmp_path):
    _files(tmp_path)
    for args in (("get",), ("get", "-o", "wide")):
        out = _run(tmp_path, *args)
        assert "c\\x1b[2Jd" in out, out  # the invalid file's row and its error line
        assert CLEAR not in out and "\x1b]" not in out, repr(out)
    out = _run(tmp_path, "get", "-o", "json")
    assert "\x1b" not in out and "\\u001b" in out  # JSON escapes it itself


def test_describe_and_errors_show_escape_sequences_escaped(tmp_path):
    _files(tmp_path)
    out = _run(tmp_path, "describe", "ok")
    assert "mo\\x1b]0;PWNED\\x07del" in out and "\x1b]" not in out, repr(out)
    assert "\x1b[1mName: ok" in out, "the reconciler's own styles stay"
    out = _run(tmp_path, "describe", "nope")
    assert "c\\x1b[2Jd" in out and CLEAR not in out, repr(out)  # "no recipe named nope (known: ...)"


def test_events_show_escape_sequences_escaped(tmp_path):
    st = tmp_path / "st"
    st.mkdir()
    (st / "events.jsonl").write_text(json.dumps({"time": "t", "kind": "LaunchFailed", "recipe": "r",
                                                 "message": f"first log line: {OSC}{CLEAR}"}) + "\n")
    r = CliRunner().invoke(cli, ["events", "--state", str(st)], color=True)
    assert "\\x1b]0;PWNED\\x07\\x1b[2J" in r.output and "\x1b" not in r.output, repr(r.output)
