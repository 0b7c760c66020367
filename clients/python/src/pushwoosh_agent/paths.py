"""Where the agent's socket is, found as ``pushwoosh-agentctl`` finds it (docs/socket-api.md B, docs/fleet.md E)."""

from __future__ import annotations

import os
from typing import List, Mapping, Optional

#: The socket when neither ``$PUSHWOOSH_AGENT_SOCKET`` nor ``$RUNTIME_DIRECTORY`` is set.
DEFAULT_SOCKET_PATH = "/run/pushwoosh-agent/agent.sock"
#: Under this directory, instance NAME of ``pushwoosh-agent@NAME`` has ``NAME/agent.sock``.
INSTANCE_RUNTIME_ROOT = "/run/pushwoosh-agent"
#: ``sockaddr_un.sun_path`` holds 108 bytes including the terminating NUL.
_MAX_SOCKET_PATH = 107


def default_socket_path(environ: Optional[Mapping[str, str]] = None) -> str:
    """The socket ``pushwoosh-agentctl`` uses without ``--socket``: ``$PUSHWOOSH_AGENT_SOCKET``, else
    ``$RUNTIME_DIRECTORY/agent.sock`` (the first directory), else the socket unit's, else
    ``/run/pushwoosh-agentd/agent.sock`` when only that exists."""
    env = os.environ if environ is None else environ
    if explicit := env.get("PUSHWOOSH_AGENT_SOCKET"):
        return explicit
    if runtime := env.get("RUNTIME_DIRECTORY", "").split(":")[0]:
        return runtime.rstrip("/") + "/agent.sock"
    return _first_existing([DEFAULT_SOCKET_PATH, "/run/pushwoosh-agentd/agent.sock"])


def instance_socket_path(name: str) -> str:
    """The socket of ``pushwoosh-agent@NAME`` as ``pushwoosh-agentctl --instance NAME`` finds it:
    ``/run/pushwoosh-agent/NAME.sock``, else ``/run/pushwoosh-agentd@NAME/agent.sock`` when only that exists."""
    if not is_instance_name(name):
        raise ValueError(f"not an instance name: {name!r} "
                         "(letters, digits, '-', '_', '.'; 1-64; not starting with '.')")
    return _first_existing([f"{INSTANCE_RUNTIME_ROOT}/{name}.sock", f"/run/pushwoosh-agentd@{name}/agent.sock"])


def is_instance_name(name: str) -> bool:
    """Whether ``--instance`` takes ``name``: ``[A-Za-z0-9_.-]``, 1 to 64, not starting with ``.``."""
    return (0 < len(name) <= 64 and not name.startswith(".")
            and all(c.isascii() and (c.isalnum() or c in "-_.") for c in name))


def _first_existing(paths: List[str]) -> str:
    return next((p for p in paths if os.path.exists(p)), paths[0])


def resolve_socket_path(socket: Optional[str] = None, instance: Optional[str] = None,
                        environ: Optional[Mapping[str, str]] = None) -> str:
    """``socket`` if given, else instance ``instance``'s socket, else :func:`default_socket_path`."""
    if socket is not None and instance is not None:
        raise ValueError("give either socket or instance, not both")
    if socket is not None:
        path = os.fspath(socket)
    elif instance is not None:
        path = instance_socket_path(instance)
    else:
        path = default_socket_path(environ)
    if not 0 < len(os.fsencode(path)) <= _MAX_SOCKET_PATH:
        raise ValueError(f"a socket path must be 1 to {_MAX_SOCKET_PATH} bytes: {path!r}")
    return path
