"""Python client of pushwoosh-agentd and the Pushwoosh emulator, and a pytest plugin (docs/python-client.md G).

::

    from pushwoosh_agent import AgentClient

    with AgentClient() as agent:                # the socket pushwoosh-agentctl would use
        if agent.is_enabled("new_checkout", False):
            color = agent.property("new_checkout", "button_color", "string", "blue")

A read answered with the caller's default warns (:class:`FallbackWarning`), or raises
(:class:`FallbackError`) from ``AgentClient(strict=True)``. Standard library only; safe to
share between threads.
"""

from __future__ import annotations

from types import ModuleType as _ModuleType

from ._version import __version__
from .client import PROPERTY_TYPES, STATES, AgentClient
from .paths import DEFAULT_SOCKET_PATH, default_socket_path, instance_socket_path, resolve_socket_path
from .emulator import EmulatorClient, RequestsTimeout
from .fixtures import Fleet, Lab, RunningEmulator
from .lab import ClockAdvance, LabAdvance, LabClient, LabClockError, LabSkipped, advance_lab
from .events import EventStream, Subscription
from .results import (ClockInfo, DeviceClockAdvance, FiredTimer, Flag, FlagDetails, FlagsUpdate, PrimerResult,
                      PushRegistration, RefreshCompleted, RefreshResult, SDKError, StateChanged, Status, StorageError)
from .errors import (AgentError, AgentNotRunning, AgentTimeout, EmulatorError, FallbackError, FallbackWarning,
                     MethodNotFound, PermissionDenied, ProtocolError, PushwooshError, RefreshError, WaitTimeout)

#: Every name imported above (the modules themselves aside) is the package's.
__all__ = ["__version__"] + sorted(name for name, value in list(globals().items()) if not name.startswith("_")
                                   and not isinstance(value, _ModuleType) and name != "annotations")
