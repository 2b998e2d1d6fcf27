"""``reconcile.gateway``: the deployment's stable address (reconciler/gateway, shell/gateway/host.py)."""

from __future__ import annotations

import ipaddress
import re
import socket

from pydantic import Field, field_validator, model_validator

from reconciler.recipe.slurm import SlurmConfig
from reconciler.recipe.types import Strict

DEFAULT_HOLD_S = 10.0


class GatewayAllocation(Strict):
    """The gateway in its own small Slurm job (CPU only) on one named node instead of next to the
    reconciler. The node is fixed (``--nodelist``): the endpoint is ``http://<node>:<port>`` and a
    job placed anywhere else would move it."""

    node: str
    partition: str | None = None  # else slurm.partition (the cluster's default_partition)
    account: str | None = None  # else slurm.account
    # the gateway job's --time; when it runs out the job is submitted again on the same node (a gap
    # of a few seconds): give it the partition's longest, or UNLIMITED where the partition allows
    time: str | None = None
    memory: str = "1G"  # sbatch --mem: nginx, the holder and the agent need ~100 MB
    qos: str | None = None  # else the recipe's sbatch_directives.qos

    @field_validator("node")
    @classmethod
    def _node(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", v):
            raise ValueError(f"expected one Slurm node name (like gpu-node7), found {v!r}")
        return v

    @field_validator("memory")
    @classmethod
    def _memory(cls, v: str) -> str:
        m = re.fullmatch(r"(\d{1,7})([KMGT]?)", str(v).upper())
        if not m or int(m[1]) == 0:
            raise ValueError(f"expected a Slurm memory size like 512M or 1G, found {v!r}")
        return m[1] + m[2]

    @field_validator("partition", "account", "qos")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9_.-]{1,128}", v):
            raise ValueError(f"expected a Slurm partition or account name, found {v!r}")
        return v

    @field_validator("time", mode="before")
    @classmethod
    def _time(cls, v: object) -> object:
        return SlurmConfig._time(v)


def _conf_path(v: str, what: str) -> str:
    """A path nginx's config names as it is: absolute, and nothing nginx would read as syntax."""
    if not re.fullmatch(r"/[A-Za-z0-9._/@+-]{1,4095}", v):
        raise ValueError(f"expected the absolute path of the {what} (letters, digits and . _ / @ + - only: "
                         f"nginx reads it unquoted), found {v[:80]!r}")
    return v


class GatewayTLS(Strict):
    """TLS on the gateway's listener (nginx's ``ssl``): PEM files the nginx master can read. The
    reconciler's own probe and the holder still speak plain HTTP to it on 127.0.0.1."""

    cert: str  # the certificate chain, PEM (ssl_certificate)
    key: str  # its private key, PEM (ssl_certificate_key)

    @field_validator("cert", "key")
    @classmethod
    def _path(cls, v: str) -> str:
        return _conf_path(v, "PEM file")


class GatewaySettings(Strict):
    """Where the gateway listens, and how long it holds a request no frontend can take."""

    # the address nginx binds on the reconciler's host: every interface (clients on the cluster
    # reach the login node), or one of them (127.0.0.1: only this host)
    listen: str = "0.0.0.0"
    # a request that finds no frontend answering (the only one relaunching, a lost allocation
    # coming back) waits this long at the gateway's holder for one, then gets a JSON 503 with
    # Retry-After; 0: that 503 at once. A recipe that scales to zero holds for
    # autoscale.hold_timeout_seconds instead.
    hold_seconds: float = Field(DEFAULT_HOLD_S, ge=0, le=1800)
    # ours: run it in its own small allocation on a named node (default: next to the reconciler)
    allocation: GatewayAllocation | None = None
    # a file of hashed API keys (reconciler/gateway/keys.py: `sha256:<hex> [label]` a line;
    # `reconciler keys hash` prints one): every request through the gateway must carry one as
    # `Authorization: Bearer <key>` (401 otherwise, before anything is held or woken). Read again
    # when it changes. None: the gateway is open, as before
    api_keys: str | None = None
    # what the holder keeps at once while no frontend answers (a deployment at zero waking up):
    # beyond either, a request gets 503 with Retry-After at once
    max_held_requests: int = Field(1024, ge=1, le=100_000)
    max_held_mb: int = Field(256, ge=1, le=16_384)
    # TLS on the gateway's listener (cert and key files); None: plain HTTP
    tls: GatewayTLS | None = None

    @field_validator("api_keys")
    @classmethod
    def _keys_path(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not v.startswith("/") or len(v) > 4096 or any(not c.isprintable() for c in v):
            raise ValueError(f"expected the absolute path of a keys file (one 'sha256:<hex> [label]' a line), "
                             f"found {v[:80]!r}")
        return v

    @field_validator("listen")
    @classmethod
    def _address(cls, v: str) -> str:
        try:
            addr = ipaddress.ip_address(v)
        except ValueError:
            raise ValueError(f"expected an IP address of this host (0.0.0.0, 127.0.0.1, ...), found {v!r}") from None
        if addr.is_multicast:
            raise ValueError(f"expected an address of this host to listen on, found the multicast address {v!r}")
        return f"[{addr}]" if addr.version == 6 else str(addr)

    @model_validator(mode="after")
    def _listen_is_this_hosts(self) -> "GatewaySettings":
        if self.allocation is not None and self.listen != "0.0.0.0":
            raise ValueError(f"listen ({self.listen}) is an address of the reconciler's host; a gateway in its "
                             f"own allocation listens on every address of {self.allocation.node}: remove listen")
        return self

    @model_validator(mode="after")
    def _tls_where_it_can_be(self) -> "GatewaySettings":
        if self.tls is None:
            return self
        if self.allocation is not None:
            raise ValueError("tls: not for a gateway in its own allocation (the reconciler probes it over plain "
                             "HTTP from its host): remove tls or allocation")
        if self.listen in ("[::]", "127.0.0.1", "[::1]"):
            raise ValueError(f"tls with listen {self.listen}: the gateway keeps a plain-HTTP listener on 127.0.0.1 "
                             f"for the reconciler's probe; listen on 0.0.0.0 or one address of this host")
        return self


def bind_error(listen: str) -> str | None:
    """Why the gateway could not listen on ``listen`` on this host (an address of another host),
    or None. Asked on an ephemeral port: it says nothing of the gateway's own port, which its
    running master may hold. A check of this host's view, as the model directory's."""
    host = listen.strip("[]")
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
    except OSError as e:
        return f"{listen} is not an address of this host ({e.strerror or e})"
    return None
