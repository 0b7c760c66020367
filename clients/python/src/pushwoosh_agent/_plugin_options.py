"""The pytest plugin's options: what its markers and ``pushwoosh_fleet(...)`` take, checked
(a typo fails the test naming the nearest known name), and the agent fixture's settings made
from them."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import pytest

from .processes import _BY_KEY, AGENT_SETTINGS, unknown_name

#: What the fixture configures unless a marker says otherwise.
AGENT_FIXTURE_DEFAULTS: Dict[str, Any] = {"disable_throttle": True, "request_timeout": "5s"}


#: The pushwoosh_agent marker's (and pushwoosh_fleet's) options besides the agent's settings.
AGENT_FIXTURE_OPTIONS = ["http", "extra_config", "client_timeout", "wait_for_flags", "strict"]
#: The pushwoosh_emulator marker's options.
EMULATOR_FIXTURE_OPTIONS = ["apps", "require_token", "tls", "admin_token", "shared", "stoppable"]


def _check_names(where: str, given: Dict[str, Any], known: List[str]) -> None:
    """A typo in a marker or fixture option ends the test with a clean failure that names
    the nearest known name, not a traceback from deep inside the fixture."""
    for name in given:
        if name not in known:
            pytest.fail(f"{where}: " + unknown_name("option", name, known), pytrace=False)


def _agent_names() -> List[str]:
    return list(AGENT_SETTINGS) + list(_BY_KEY) + AGENT_FIXTURE_OPTIONS


def _marker_kwargs(request: pytest.FixtureRequest, name: str) -> Dict[str, Any]:
    merged: Dict[str, Any] = {}
    for marker in reversed(list(request.node.iter_markers(name))):  # the closest marker wins
        if marker.args:
            pytest.fail(f"@pytest.mark.{name} takes keyword arguments only, not {marker.args!r}", pytrace=False)
        merged.update(marker.kwargs)
    known = EMULATOR_FIXTURE_OPTIONS if name == "pushwoosh_emulator" else _agent_names()
    _check_names(f"@pytest.mark.{name}", merged, known)
    return merged


def _strict(request: pytest.FixtureRequest, options: Dict[str, Any], where: str) -> bool:
    """The ``strict`` option (taken out of ``options``), else ``--pushwoosh-strict``: checked to be a bool."""
    value = options.pop("strict", None)
    if value is None:
        return bool(request.config.getoption("--pushwoosh-strict"))
    if not isinstance(value, bool):
        pytest.fail(f"{where}: strict must be True or False, not {value!r}", pytrace=False)
    return value


def _agent_options(request: pytest.FixtureRequest, extra: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    marked = _marker_kwargs(request, "pushwoosh_agent")
    marked.update(extra or {})
    # With the device clock controlled (docs/device-clock.md H) a test runs the SDK's real timings
    # (the throttle included): it moves the clock instead of shortening them.
    options = {} if marked.get("clock") == "controlled" else dict(AGENT_FIXTURE_DEFAULTS)
    options.update(marked)
    if options.pop("http", False) or "pushwoosh_http_url" in request.fixturenames:
        options.setdefault("http_listen", "127.0.0.1:0")
    return options
