"""The pytest fixtures' types, importable without pytest: :class:`RunningEmulator` (``pushwoosh_emulator``),
:class:`Fleet` (what ``pushwoosh_fleet(n)`` returns) and :class:`Lab` (``pushwoosh_lab``)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Union

from .client import AgentClient
from .emulator import EmulatorClient
from .lab import ClockAdvance, LabClient, advance_lab
from ._process_support import tail
from .emulator_process import EmulatorProcess
from .processes import AgentProcess

__all__ = ["RunningEmulator", "Fleet", "Lab"]


class RunningEmulator(EmulatorClient):
    """The ``pushwoosh_emulator`` fixture: an :class:`EmulatorClient` of a running emulator, and the
    ``lab`` the test's agents live in (its own, or for ``stoppable=True`` the session's)."""

    def __init__(self, process: EmulatorProcess, lab: Optional[LabClient] = None) -> None:
        super().__init__(process.base_url, ca_file=process.ca_file, admin_token=process.admin_token)
        self.process = process
        self.lab = lab or process.lab
        self.ca_file = process.ca_file  #: with ``tls=True`` the test CA (the agents' ``CAFile=``)
        self.log_path = process.log_path
        self.token_file = process.token_file  #: the file of its admin (and lab) token
        self.app_code = "ABCDE-12345"

    def log(self) -> str:
        """The emulator's log so far."""
        return tail(self.log_path, 1 << 30)

    def stop(self) -> Optional[int]:
        """Stops the emulator until :meth:`start`; a RuntimeError when agents live in its lab (a test
        that takes the server away asks for ``@pytest.mark.pushwoosh_emulator(stoppable=True)``)."""
        if self.running and self.lab.emulator.base_url == self.base_url:
            living = [d["name"] for d in self.lab.devices() if d.get("owned") and d.get("state") != "exited"]
            if living:
                raise RuntimeError(f"stopping this emulator would end the agents in its lab ({', '.join(living)}): "
                                   "mark the test @pytest.mark.pushwoosh_emulator(stoppable=True) to give it an "
                                   "emulator of its own to stop, its agents in the session's lab")
        return self.process.stop()

    def start(self) -> "RunningEmulator":
        """Starts the emulator again on the same port, its state afresh."""
        self.process.start()
        return self

    @property
    def running(self) -> bool:
        return self.process.running


class Fleet(List[AgentProcess]):
    """The agents of ``pushwoosh_fleet`` in order, agent ``i`` with User ID ``user_ids[i]``."""

    def __init__(self, agents: List[AgentProcess], user_ids: List[str],
                 emulator: Optional[EmulatorClient] = None) -> None:
        super().__init__(agents)
        self.user_ids = user_ids
        self.emulator = emulator

    def advance_clock(self, seconds: Optional[float] = None, *, until: Optional[str] = None) -> ClockAdvance:
        """Moves the lab and the running agents' clocks together (:func:`~pushwoosh_agent.lab.advance_lab`)."""
        lab: Optional[Union[LabClient, EmulatorClient]] = self[0].lab if self else self.emulator
        if lab is None:
            raise ValueError("advance_clock: this fleet has no agent and no emulator")
        return advance_lab(lab, self, seconds, until=until, running=True)

    @property
    def clients(self) -> List[AgentClient]:
        """Each agent's :class:`AgentClient`."""
        return [agent.client for agent in self]

    def hwids(self) -> List[str]:
        """Each agent's HWID (from its ``status``)."""
        return [str(agent.client.status()["hwid"]) for agent in self]


class Lab:
    """The ``pushwoosh_lab`` fixture: the test's emulator and every agent it started."""

    def __init__(self, emulator: "RunningEmulator", started: List[AgentProcess]) -> None:
        self.emulator = emulator
        self._started = started

    @property
    def agents(self) -> List[AgentProcess]:
        """The agents the test started (``pushwoosh_agent``, ``pushwoosh_fleet``), in order."""
        return list(self._started)

    def devices(self) -> List[Dict[str, Any]]:
        """The lab's devices as it lists them (``GET /lab/devices``: name, HWID, state, times)."""
        return self.emulator.lab.devices()

    def advance_clock(self, seconds: Optional[float] = None, *, until: Optional[str] = None,
                      devices: Optional[Sequence[AgentProcess]] = None) -> ClockAdvance:
        """Moves the lab and the clocks of ``devices`` (default: every agent that runs) together, all or
        none (:func:`~pushwoosh_agent.lab.advance_lab`)."""
        chosen = self._started if devices is None else list(devices)
        return advance_lab(self.emulator.lab, chosen, seconds, until=until, running=True)
