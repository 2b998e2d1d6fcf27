"""The gateway: one stable address per deployment in front of its Ready frontends (pure part).

The gateway is a real nginx (Debian's, as srtctl runs nginx in front of its frontends) whose
master the reconciler starts with its own config, prefix and pid file under
``state/<recipe>/gateway/``. This module only renders that config; ``shell/gateway/host.py`` runs,
reloads and restarts the process.

Choices, with nginx's documented semantics (ngx_http_proxy_module, ngx_http_upstream_module):

- ``proxy_next_upstream error timeout http_503 http_404 non_idempotent``: a request is passed to
  the next frontend when the one it went to refused the connection, closed it (killed) before
  sending any byte of an answer, or answered 503 (a Dynamo frontend whose workers are gone or not
  registered yet: it started nothing) or 404 (a Dynamo frontend just relaunched answers an empty
  404 until it has read the model's registration; the holder tells that from a real 404, which
  has a body, and hands the real one back); once a byte reached the client nothing is retried.
  POSTs included: an OpenAI completion changes nothing server-side, so sending it again costs
  only the duplicate work, and a frontend killed under a request does not fail it (issue 27's
  target: a frontend killed among several fails no request). Bounded by
  ``proxy_next_upstream_tries`` (each frontend at most once, plus one).
- ``max_fails=1 fail_timeout=...``: passive failure detection; one refused connection takes the
  frontend out of rotation for ``fail_timeout`` before nginx tries it again. The reconciler's
  own probes then remove it from the upstream list for good (reload) until it is Ready again.
- SSE streaming: ``proxy_buffering off``; long read timeouts (a completion may take minutes) so a
  slow answer is not cut. No kept-alive upstream connections (see ``render``).
- Upstream changes go through a graceful reload (SIGHUP): new workers take new connections, old
  workers finish the requests they carry (bounded by ``worker_shutdown_timeout``).
- No frontend alive (``unproven``): the upstreams are the addresses the frontends are relaunched
  at (a life keeps its port), with ``max_fails=0`` — nothing there is known to serve, so no
  failure is counted and the first frontend to listen again gets the next request, without
  waiting for its probe, its canary and a reload (the only frontend's relaunch gap). A request
  that no frontend took (nginx's own 502/504) gets a JSON 503 saying so.
- No frontend placed at all: nginx needs at least one server in an upstream, so the server
  answers 503 with a JSON error saying so instead of proxying.
- The holder (``holder``: the port of the gateway's holder, ``gateway/holder.py``; every recipe
  unless ``reconcile.gateway.hold_seconds: 0``): with no frontend placed every request goes to it,
  which keeps it until a frontend serves (or its timeout); with frontends it is their ``backup``
  server, so a request every frontend failed (the only frontend relaunching, a deployment draining
  to zero or waking up) is held too rather than answered 503.
- The front door: only OpenAI paths (``/v1/...``) and ``/health`` are passed on; anything else
  (the router's ``/metrics``, the holder's ``/holder/stats``, ``/favicon.ico``) gets a JSON 404
  from nginx itself: it reaches no frontend and is never held, so it wakes nothing. With keys
  (``auth``: the port of the holder, which checks them: nginx cannot hash), every passed request
  is first asked of ``/holder/auth`` (ngx_http_auth_request_module): one without a valid
  ``Authorization: Bearer`` key gets 401 before it is proxied, held or counted as demand.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

ANY6 = "[::]"  # every interface, IPv6 and (ipv6only=off) IPv4
ANY = "0.0.0.0"  # every interface: clients come from anywhere the login node is reachable from
FAIL_TIMEOUT_S = 5  # a frontend that refused a connection rests this long before nginx tries it again
READ_TIMEOUT_S = 3600  # a completion (or a stream) may run long: never cut by the gateway
# old workers of a reload finish their requests within this: as long as a request may run, so a
# reload never cuts a stream the read timeout would have let finish
SHUTDOWN_TIMEOUT_S = READ_TIMEOUT_S
CONNECTIONS = 4096  # per worker; a proxied request holds two (client and frontend)
OPEN_FILES = 2 * CONNECTIONS + 64  # a login node's soft limit is often 1024: raised for the worker
# the largest request body passed on (nginx answers 413 beyond it): above an OpenAI request with
# long prompts or a few base64 images, bounded so a client cannot fill the disk under
# tmp/body (bodies past the 1 MB buffer are spooled there) nor the holder's memory with one request
MAX_BODY_MB = 32


@dataclass(frozen=True)
class GatewayConfig:
    """What one gateway serves. ``upstreams``: host:port of the Ready frontends, in a stable order."""

    recipe: str
    port: int
    prefix: Path  # nginx's -p (argv): the pid file, logs and temp directories, named relative to it
    upstreams: tuple[str, ...] = ()
    unproven: bool = False  # none of them is known to serve now: count no failures against them
    listen: str = ANY  # reconcile.gateway.listen
    holder: int | None = None  # the holder's port on 127.0.0.1 (a recipe that scales to zero)
    auth: int | None = None  # the port on 127.0.0.1 that checks API keys (the holder's); None: open
    # who nginx's workers run as when its master is root (the reconciler's own user): the default,
    # nobody, can neither traverse a state directory at 0700 nor spool a body under it (500)
    user: str | None = None
    tls: tuple[str, str] | None = None  # (cert, key) PEM paths: TLS on the listener; 127.0.0.1 stays plain
    # /gateway/health (it names the frontends' addresses) answered on loopback only: a gateway on the
    # reconciler's host, whose probe and holder ask it there (one in its own job is probed from afar)
    loopback_health: bool = False
    # SO_REUSEPORT on the listener: a renamed deployment's gateway binds the old name's address beside
    # the old master, which then stops (core/plan/rename.py); set once, kept (a reload adds it to the
    # bound socket; one that dropped it could not rebind the clones)
    reuseport: bool = False


def _check(cfg: GatewayConfig) -> None:
    """nginx config text is built from these values: refuse anything that could break out of a token."""
    if not 0 < cfg.port < 65536:
        raise ValueError(f"gateway port {cfg.port} out of range")
    if cfg.holder is not None and not 0 < cfg.holder < 65536:
        raise ValueError(f"gateway holder port {cfg.holder} out of range")
    if cfg.auth is not None and not 0 < cfg.auth < 65536:
        raise ValueError(f"gateway key check port {cfg.auth} out of range")
    for up in cfg.upstreams:
        host, _, port = up.rpartition(":")
        if not host or not port.isdigit() or not all(c.isalnum() or c in ".-_[]:" for c in host):
            raise ValueError(f"gateway upstream {up!r} is not host:port")
    # a namespaced recipe's key joins its folder and name with '@' (recipe/namespaces.py); '@' and
    # '/' only ever appear here in a comment and inside single-quoted JSON, where nginx reads no syntax
    if not all(c.isalnum() or c in "._-@/" for c in cfg.recipe):
        raise ValueError(f"gateway of {cfg.recipe!r}: a recipe name with characters nginx would read as syntax")
    if cfg.user is not None and not all(w and all(c.isalnum() or c in "._-" for c in w) for w in cfg.user.split(" ")):
        raise ValueError(f"gateway user {cfg.user!r} has characters nginx would read as syntax")
    if cfg.tls is not None and not all(p.startswith("/") and all(c.isalnum() or c in "._/@+-" for c in p)
                                       for p in cfg.tls):
        raise ValueError(f"gateway TLS files {cfg.tls!r}: characters nginx would read as syntax")
    # the prefix never appears in the text: every path is relative to nginx's -p (an argv item), so
    # a state directory with a space, a quote or a $ in its path needs no quoting here
    if any(c in cfg.listen for c in ' \t\n;{}"\'#$\\'):
        raise ValueError(f"gateway address {cfg.listen!r} has characters nginx would read as syntax")


def _digest(doc: list) -> str:
    return hashlib.sha256(json.dumps(doc).encode()).hexdigest()[:16]


def instance(recipe: str, prefix: Path) -> str:
    """Which gateway answers: its recipe and state directory (another reconciler's nginx on the
    same node and port, or a stale one, is not this one, whatever it serves)."""
    return _digest([recipe, str(prefix)])


def version(cfg: GatewayConfig) -> str:
    """A digest of everything the config is rendered from: two configs serve alike iff it matches."""
    return _digest([cfg.recipe, cfg.port, str(cfg.prefix), list(cfg.upstreams), cfg.unproven, cfg.listen, cfg.holder]
                   + ([cfg.auth] if cfg.auth is not None else [])  # without keys: the digest of before
                   + ([list(cfg.tls)] if cfg.tls is not None else [])
                   + (["loopback-health"] if cfg.loopback_health else [])
                   + (["reuseport"] if cfg.reuseport else []))


OPENAI = ("/v1/", "= /health")  # what is passed on to the frontends; anything else is nginx's 404
AUTH = "/_gateway/auth"  # the subrequest's location (internal: no client can ask it)


def _checked(cfg: GatewayConfig) -> str:
    """A passed location's key check: before anything is proxied or held."""
    # error_page is inherited only by a location that has none of its own (the proxied ones do)
    return (f"            auth_request {AUTH};\n"
            "            error_page 401 = @unauthorized;\n") if cfg.auth is not None else ""


_NOT_HERE = json.dumps({"error": {"message": "not found: the gateway passes on /v1/... and /health only",
                                  "type": "not_found", "code": 404}})


def _front_door(cfg: GatewayConfig) -> str:
    """The 404 for every path that is not OpenAI's; with keys, the check's subrequest and its 401."""
    not_here = _NOT_HERE
    text = ("        location / {\n"
            "            default_type application/json;\n"
            f"            return 404 '{not_here}\\n';\n"
            "        }\n")
    if cfg.auth is None:
        return text
    denied = json.dumps({"error": {"message": f"{cfg.recipe}: a valid API key is required (Authorization: Bearer <key>)",
                                   "type": "authentication_error", "code": 401}})
    return text + (
        f"        location = {AUTH} {{\n"
        "            internal;\n"
        f"            proxy_pass http://127.0.0.1:{cfg.auth}/holder/auth;\n"
        "            proxy_pass_request_body off;\n"
        '            proxy_set_header Content-Length "";\n'
        "            proxy_set_header X-Original-URI $request_uri;\n"
        "            proxy_connect_timeout 2s;\n"
        "            proxy_read_timeout 5s;\n"
        "        }\n"
        "        location @unauthorized {\n"
        "            default_type application/json;\n"
        "            add_header WWW-Authenticate 'Bearer realm=\"gateway\"' always;\n"
        f"            return 401 '{denied}\\n';\n"
        "        }\n")


def render(cfg: GatewayConfig) -> str:
    """The complete nginx.conf of one gateway (deterministic: the same input renders the same text)."""
    _check(cfg)
    upstream, location = _routes(cfg)
    return (
        f"# gateway of {cfg.recipe}: written by the reconciler, replaced on every upstream change\n"
        + (f"user {cfg.user};\n" if cfg.user else "")
        + "worker_processes 1;\n"
        f"worker_rlimit_nofile {OPEN_FILES};\n"
        "pid nginx.pid;\n"
        "error_log error.log warn;\n"
        f"worker_shutdown_timeout {SHUTDOWN_TIMEOUT_S}s;\n"
        "events {\n    worker_connections " + str(CONNECTIONS) + ";\n}\n"
        "http {\n"
        "    access_log off;\n"
        "    client_body_temp_path tmp/body;\n"
        "    proxy_temp_path tmp/proxy;\n"
        "    fastcgi_temp_path tmp/fastcgi;\n"
        "    uwsgi_temp_path tmp/uwsgi;\n"
        "    scgi_temp_path tmp/scgi;\n"
        f"    client_max_body_size {MAX_BODY_MB}m;\n"
        "    client_body_buffer_size 1m;\n"
        "    keepalive_timeout 75s;\n"
        + upstream
        + "    server {\n"
        + _listen(cfg)
        + _health(cfg)
        + location
        + "    }\n"
        "}\n")


def _routes(cfg: GatewayConfig) -> tuple[str, str]:
    """(the upstream block, the OpenAI locations and the front door): proxied to the frontends (and
    the holder), or a 503 of its own when there is neither."""
    hold = f"127.0.0.1:{cfg.holder}" if cfg.holder is not None else None
    if not (cfg.upstreams or hold):
        no_frontend = json.dumps({"error": {"message": f"{cfg.recipe}: no Ready frontend behind the gateway",
                                            "type": "service_unavailable", "code": 503}})
        return "", "".join(
            f"        location {where} {{\n"
            + _checked(cfg) +
            "            default_type application/json;\n"
            f"            return 503 '{no_frontend}\\n';\n"
            "        }\n" for where in OPENAI) + _front_door(cfg)
    no_answer = json.dumps({"error": {"message": f"{cfg.recipe}: no frontend behind the gateway answered",
                                      "type": "service_unavailable", "code": 503}})
    # all unproven and marked failed, nginx would answer "no live upstreams" for fail_timeout
    # after one of them is back (a single server is never marked: nginx ignores max_fails then)
    fails = "max_fails=0" if cfg.unproven else f"max_fails=1 fail_timeout={FAIL_TIMEOUT_S}s"
    servers = "".join(f"        server {u} {fails};\n" for u in cfg.upstreams)
    if hold:  # alone, or the frontends' backup: tried once every frontend failed the request
        servers += f"        server {hold}{' backup' if cfg.upstreams else ''};\n"
    tries = len(cfg.upstreams) + 1 + int(hold is not None)
    # no kept-alive upstream connections: a frontend that died is then seen at once as a refused
    # connect (next frontend, no wait), never as a dead cached connection
    upstream = ("    upstream frontends {\n" + servers + "    }\n")
    location = "".join(
        f"        location {where} {{\n"
        + _checked(cfg) +
        "            proxy_pass http://frontends;\n"
        "            proxy_http_version 1.1;\n"
        "            proxy_set_header Host $http_host;\n"
        "            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n"
        "            proxy_buffering off;\n"
        "            proxy_request_buffering on;\n"
        "            proxy_next_upstream error timeout http_503 http_404 non_idempotent;\n"
        f"            proxy_next_upstream_tries {tries};\n"
        "            proxy_connect_timeout 2s;\n"
        f"            proxy_read_timeout {READ_TIMEOUT_S}s;\n"
        f"            proxy_send_timeout {READ_TIMEOUT_S}s;\n"
        "            error_page 502 504 = @nofrontend;\n"
        "        }\n" for where in OPENAI) + (
        "        location @nofrontend {\n"
        "            default_type application/json;\n"
        f"            return 503 '{no_answer}\\n';\n"
        "        }\n")
    return upstream, location + _front_door(cfg)


def _listen(cfg: GatewayConfig) -> str:
    # [::] with nginx's default ipv6only=on would refuse every IPv4 client of the host's name
    return (f"        listen {cfg.listen}:{cfg.port} backlog=4096{' ipv6only=off' if cfg.listen == ANY6 else ''}"
            f"{' reuseport' if cfg.reuseport else ''}{' ssl' if cfg.tls else ''};\n"
            # bound to one address: the reconciler's probe and the holder still reach it on loopback;
            # with TLS, loopback stays plain HTTP for them (nginx tells the two apart by local address)
            + (f"        listen 127.0.0.1:{cfg.port}{'' if cfg.listen == ANY else ' backlog=4096'}"
               f"{' reuseport' if cfg.reuseport and cfg.listen != ANY else ''};\n"
               if cfg.listen not in (ANY, ANY6, "127.0.0.1") or cfg.tls else "")
            + (f"        ssl_certificate {cfg.tls[0]};\n        ssl_certificate_key {cfg.tls[1]};\n"
               "        ssl_protocols TLSv1.2 TLSv1.3;\n" if cfg.tls else ""))


def _health(cfg: GatewayConfig) -> str:
    # what a reload is confirmed by: the shell waits until the gateway answers with the new list
    # (and, for a gateway in its own job, this config's version: a change of the hold is one too)
    health = json.dumps({"gateway": cfg.recipe, "upstreams": list(cfg.upstreams), "unproven": cfg.unproven,
                         "version": version(cfg), "instance": instance(cfg.recipe, cfg.prefix)})
    return ("        location = /gateway/health {\n"
            "            default_type application/json;\n"
            # `return` runs before allow/deny would (rewrite phase): the address is tested in an `if`
            + ("            if ($remote_addr !~ '^(127\\.0\\.0\\.1|::1|::ffff:127\\.0\\.0\\.1)$') {\n"
               f"                return 404 '{_NOT_HERE}\\n';\n"
               "            }\n" if cfg.loopback_health else "")
            + f"            return 200 '{health}\\n';\n"
            "        }\n")


__all__ = ["ANY", "GatewayConfig", "render", "version", "instance", "FAIL_TIMEOUT_S"]
