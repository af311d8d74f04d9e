"""Joining a Ray cluster safely: Ray's token authentication for ``--ray-address`` / ``train.ray.address``.

A Ray cluster runs whatever code a client sends it, so the clusters of ``docker/compose.yaml`` run with
Ray's token authentication (``RAY_AUTH_MODE=token``); a local cluster started by ``ray.init()`` has it on by
default (Ray writes the token to ``~/.ray/auth_token``). A client joining a cluster by its address must send
that token, and Ray does not turn token mode on by itself for an explicit address. The token comes from
Ray's own settings, read by Ray's token loader:

* ``RAY_AUTH_TOKEN_PATH=FILE`` (a file holding the token, e.g. ``docker/ray_auth_token``) or
  ``RAY_AUTH_TOKEN=TOKEN``: when either is set (and ``RAY_AUTH_MODE`` is not), :func:`use_token` turns token
  mode on for this process and the processes it starts;
* ``RAY_AUTH_MODE=token`` with neither: the token in ``~/.ray/auth_token``.

Before ``ray.init`` joins a ``host:port`` address, :func:`check_cluster` asks the cluster's GCS for its id
with the token (one RPC, a few seconds at most), so a missing or wrong token, or no cluster at all, is one
clear line instead of Ray's half-minute of retries.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

from embodied_ws.core.errors import UserError

#: Ray's settings (read by Ray's C++ token loader in every Ray process)
MODE_ENV, TOKEN_ENV, TOKEN_PATH_ENV = "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"
#: where the address came from, for error lines
WHERE = "--ray-address"
#: a GCS address that :func:`check_cluster` can ask directly (``auto`` and ``ray://`` are left to Ray)
#: how to give the token, in every refusal line
TOKEN_HINT = "give the cluster's token: RAY_AUTH_TOKEN_PATH=FILE (e.g. docker/ray_auth_token) or RAY_AUTH_TOKEN=TOKEN"
_HOST_PORT = re.compile(r"^(?P<host>\[[0-9a-fA-F:]+\]|[^\s:/\[\]]+):(?P<port>\d{1,5})$")


def _read_token_file(path: str, where: str) -> None:
    """Refuse a token file that is missing, unreadable or empty (one line naming it)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise UserError(f"Ray token file {p} does not exist (make it with docker/ray_token.sh)", where)
    try:
        token = p.read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read the Ray token file {p}: {exc}", where) from None
    if not token:
        raise UserError(f"Ray token file {p} is empty", where)


def use_token(token_file: str | None = None) -> bool:
    """Turn on Ray token authentication for this process (and its children) when a token was given.

    :param token_file: a file holding the cluster's token (wins over ``RAY_AUTH_TOKEN``/``RAY_AUTH_TOKEN_PATH``)
    :returns: True when token mode is on
    :raises UserError: a token file that is missing or empty, or a ``RAY_AUTH_MODE`` Ray does not know
    """
    changed = False
    if token_file:
        _read_token_file(token_file, "--ray-token-file")
        os.environ[TOKEN_PATH_ENV] = str(Path(token_file).expanduser().resolve())
        os.environ.pop(TOKEN_ENV, None)
        os.environ[MODE_ENV] = "token"
        changed = True
    elif os.environ.get(TOKEN_PATH_ENV) and not os.environ.get(TOKEN_ENV):
        _read_token_file(os.environ[TOKEN_PATH_ENV], TOKEN_PATH_ENV)
    mode = os.environ.get(MODE_ENV)
    if mode is None and (os.environ.get(TOKEN_ENV) or os.environ.get(TOKEN_PATH_ENV)):
        os.environ[MODE_ENV] = mode = "token"
        changed = True
    if mode is not None and mode.lower() not in ("token", "disabled"):
        raise UserError(f"must be 'token' or 'disabled', got {mode!r}", MODE_ENV)
    if changed:
        _refresh_ray_config()
    return (mode or "").lower() == "token"


def _refresh_ray_config() -> None:
    """Make Ray's cached config and token see the environment just set (as ``ray.init`` itself does).

    Nothing to do before Ray is imported: it reads the environment then.
    """
    if "ray._raylet" not in sys.modules:
        return
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def _auth_metadata() -> tuple[tuple[str, str], ...]:
    """The gRPC metadata Ray's own clients send (empty when token mode is off or no token is found)."""
    from ray._raylet import AuthenticationTokenLoader

    loader = AuthenticationTokenLoader.instance()
    return tuple(loader.get_token_for_http_header().items()) if loader.has_token() else ()


def check_cluster(address: str, timeout_s: float = 5.0) -> bool:
    """Ask the GCS at ``host:port`` for its cluster id with this process's token; refuse in one line.

    :param address: the cluster address (``auto`` and ``ray://`` addresses are not checked here)
    :param timeout_s: how long to wait for the answer
    :returns: True when checked and accepted, False when the address is not a ``host:port``
    :raises UserError: the cluster refused the token (or its absence), or nothing answered
    """
    if not _HOST_PORT.match(address) or os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        return False
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    metadata = _auth_metadata()
    with grpc.insecure_channel(address) as channel:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        try:
            stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), metadata=metadata, timeout=timeout_s)
        except grpc.RpcError as exc:
            code = exc.code()
            if code == grpc.StatusCode.UNAUTHENTICATED:
                why = "refused this client's token" if metadata else "requires a token and none was given"
                raise UserError(f"the Ray cluster at {address} {why}: {TOKEN_HINT}", WHERE) from None
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise UserError(f"no Ray cluster answers at {address} ({code.name.lower()})", WHERE) from None
            raise UserError(f"the Ray cluster at {address} answered {code.name}: {exc.details()}", WHERE) from None
    return True


def join(ray: Any, address: str, **kwargs: Any) -> None:
    """``ray.init(address=...)`` with the token given by the environment, every failure one line.

    :param ray: the imported ``ray`` module
    :param address: ``auto``, ``host:port`` or ``ray://host:port``
    :param kwargs: further ``ray.init`` arguments
    :raises UserError: the cluster refused this client, or cannot be reached
    """
    use_token()
    check_cluster(address)
    try:
        ray.init(address=address, **kwargs)
    except ray.exceptions.AuthenticationError as exc:
        why = f"the Ray cluster at {address} refused this client ({exc.message})"
        raise UserError(f"{why}: {TOKEN_HINT}", WHERE) from None
    except ConnectionError as exc:
        raise UserError(f"cannot join the Ray cluster at {address}: {exc}", WHERE) from None
