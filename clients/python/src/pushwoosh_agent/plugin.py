"""The pytest plugin (entry point ``pytest11``): the real emulator and agents as fixtures, configured
by the markers ``pushwoosh_agent(**settings)`` and ``pushwoosh_emulator(...)`` (the package's README
has the reference). A failed test's report gets the agents' and the emulator's logs."""

from __future__ import annotations

import os
import shutil
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest

from . import emulator_process
from .client import AgentClient
from .errors import AgentTimeout, EmulatorError
from .fixtures import Fleet, Lab, RunningEmulator
from .tls import TestCA
from ._process_support import (_SETTING_NAMES, EXAMPLE_APP_PATH, StartError, find_binary, short_temp_dir, tail,
                               unknown_name)
from .emulator_process import EmulatorProcess, session_emulator, stop_launcher_labs
from .processes import AgentProcess

#: What the fixture configures unless a marker says otherwise.
AGENT_FIXTURE_DEFAULTS: Dict[str, Any] = {"disable_throttle": True, "request_timeout": "5s"}
#: The pushwoosh_agent marker's (and pushwoosh_fleet's) options besides the agent's settings.
AGENT_FIXTURE_OPTIONS = ["http", "extra_config", "client_timeout", "wait_for_flags", "strict"]
_AGENT_NAMES = _SETTING_NAMES + AGENT_FIXTURE_OPTIONS  # what the pushwoosh_agent marker and pushwoosh_fleet take
#: The pushwoosh_emulator marker's options.
EMULATOR_FIXTURE_OPTIONS = ["apps", "require_token", "tls", "admin_token", "shared", "stoppable"]


def _check_names(where: str, given: Dict[str, Any], known: List[str]) -> None:
    """A typo in an option fails the test cleanly, naming the nearest known name."""
    for name in given:
        if name not in known:
            pytest.fail(f"{where}: " + unknown_name("option", name, known), pytrace=False)


def _marker_kwargs(request: pytest.FixtureRequest, name: str, known: List[str]) -> Dict[str, Any]:
    merged: Dict[str, Any] = {}
    for marker in reversed(list(request.node.iter_markers(name))):  # the closest marker wins
        if marker.args:
            pytest.fail(f"@pytest.mark.{name} takes keyword arguments only, not {marker.args!r}", pytrace=False)
        merged.update(marker.kwargs)
    _check_names(f"@pytest.mark.{name}", merged, known)
    return merged


_LOGS = pytest.StashKey[Dict[Tuple[str, str], None]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pushwoosh", "pushwoosh-agent fixtures")
    group.addoption("--pushwoosh-bin", metavar="DIR", default=os.environ.get("PUSHWOOSH_BIN") or None,
                    help="directory with pushwoosh-agentd and pushwoosh-emulator, best given as an absolute path "
                         "(default: $PUSHWOOSH_BIN, else PATH)")
    group.addoption("--pushwoosh-strict", action="store_true", default=False,
                    help="the fixtures' clients raise FallbackError when a read answers with the caller's default "
                         "(instead of a FallbackWarning); a marker's strict=False still wins")


def pytest_configure(config: pytest.Config) -> None:
    # The session's one lab (its emulator is pushwoosh_emulator's) takes its binaries from --pushwoosh-bin.
    value = config.getoption("--pushwoosh-bin")
    emulator_process.LAB_BIN_DIR = os.path.abspath(value) if value else None
    config.addinivalue_line("markers", "pushwoosh_agent(**settings): the pushwoosh_agent fixture's agent "
                                       "(refresh_interval='5s', user_id='alice', wait_for_flags=False, ...)")
    config.addinivalue_line("markers", "pushwoosh_emulator(apps=..., require_token=None, tls=False, admin_token=None, "
                                       "shared=True, stoppable=False): the pushwoosh_emulator fixture's emulator")


def pytest_sessionfinish(session: pytest.Session) -> None:
    stop_launcher_labs()  # the session's emulator, and any agent still in its lab


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed:
        for title, path in item.stash.get(_LOGS, {}):
            report.sections.append((f"{title} ({report.when})", tail(path)))


def _register_log(node: pytest.Item, title: str, path: str) -> None:
    node.stash.setdefault(_LOGS, {})[title, path] = None  # a dict: each log once, in order


@pytest.fixture(scope="session")
def pushwoosh_bin(pytestconfig: pytest.Config) -> Optional[str]:
    """``--pushwoosh-bin`` (absolute), or None for PATH."""
    value: Optional[str] = pytestconfig.getoption("--pushwoosh-bin")
    if value == "":
        pytest.fail("--pushwoosh-bin is empty (a $(...) that expanded to nothing, such as a "
                    "$(swift build --show-bin-path) run outside the clone?): give the absolute path of the "
                    "directory with pushwoosh-agentd and pushwoosh-emulator", pytrace=False)
    if not value:
        return None
    path = os.path.abspath(value)
    if path != value and not os.path.isdir(path):
        pytest.fail(f"--pushwoosh-bin {value!r} is relative, read from the directory pytest started in "
                    f"({os.getcwd()}): {path} is not a directory; give the absolute path of the directory that holds "
                    "pushwoosh-agentd and pushwoosh-emulator", pytrace=False)
    return path


@pytest.fixture
def pushwoosh_tmp_dir() -> Iterator[str]:
    """A short temporary directory (socket paths must fit in 107 bytes), removed afterwards."""
    path = short_temp_dir()
    os.chmod(path, 0o755)  # lets a test's unprivileged client reach a socket with a permissive mode
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def _pushwoosh_started() -> List[AgentProcess]:
    """Every agent the test started, for pushwoosh_lab."""
    return []


@pytest.fixture
def pushwoosh_emulator(request: pytest.FixtureRequest, pushwoosh_bin: Optional[str],
                       pushwoosh_tmp_dir: str) -> RunningEmulator:
    """A :class:`RunningEmulator` with the example application ``ABCDE-12345``: the session's, reset before
    each test, unless the marker asks for anything else (then the test's own; the README has the options)."""
    options = _marker_kwargs(request, "pushwoosh_emulator", EMULATOR_FIXTURE_OPTIONS)
    apps = options.get("apps", EXAMPLE_APP_PATH)
    stoppable = bool(options.get("stoppable"))
    # Only the plain example lab is the session's; anything else the marker asks for is the test's own.
    own = stoppable or not options.get("shared", True) or apps != EXAMPLE_APP_PATH or options.get("tls") \
        or options.get("require_token") is not None or options.get("admin_token") is not None
    try:
        if not own:
            process = session_emulator(pushwoosh_bin)
            process.client.reset()  # what an earlier test armed, killed or advanced is gone
        else:
            ca = TestCA(pushwoosh_tmp_dir, "emulator-ca") if options.get("tls") else None  # agents trust it (CAFile=)
            tls, ca_file = (ca.issue("emulator"), ca.ca_file) if ca is not None else (None, None)
            process = EmulatorProcess(pushwoosh_tmp_dir, apps=apps, require_token=options.get("require_token"),
                                      binary=find_binary("pushwoosh-emulator", pushwoosh_bin), tls=tls, ca_file=ca_file,
                                      admin_token=options.get("admin_token")).start()
            request.addfinalizer(process.stop)
        lab = session_emulator(pushwoosh_bin).lab if stoppable else None
    except (StartError, EmulatorError) as error:
        pytest.fail(str(error), pytrace=False)
    _register_log(request.node, "pushwoosh-emulator log", process.log_path)
    return RunningEmulator(process, lab)


def _wait_for_first_refresh(agent: AgentProcess, timeout: float = 15.0) -> None:
    """Until the first flags request is answered or the state leaves ``notReady``: the first ``refreshCompleted``
    or ``stateChanged`` after a status that says neither happened yet."""
    client = agent.client
    with client.events("refresh", "state") as stream:
        status = client.status()
        if status.get("lastRefreshAt") is None and status.get("state") == "notReady":
            try:
                stream.next(None, timeout)
            except AgentTimeout:
                pytest.fail(f"pushwoosh-agentd made no flags request within {timeout:g} s (status {client.status()})",
                            pytrace=False)


def _start_agents(request: pytest.FixtureRequest, emulator: RunningEmulator, started: List[List[AgentProcess]],
                  where: str, places: List[Tuple[str, Dict[str, Any]]], settings: Optional[Dict[str, Any]] = None,
                  wait_for_flags: Optional[bool] = None) -> List[AgentProcess]:
    """An agent in each ``(directory, own settings)`` of ``places``, in ``emulator``'s lab, with the marker's
    options and ``settings``; each in every list of ``started`` before it starts, closed with the fixture."""
    marked = {**_marker_kwargs(request, "pushwoosh_agent", _AGENT_NAMES), **(settings or {})}
    # A controlled clock (docs/device-clock.md H) runs the SDK's real timings: the test moves the clock.
    options = {**({} if marked.get("clock") == "controlled" else AGENT_FIXTURE_DEFAULTS), **marked}
    if options.pop("http", False) or "pushwoosh_http_url" in request.fixturenames:
        options.setdefault("http_listen", "127.0.0.1:0")
    if emulator.ca_file is not None:
        options.setdefault("ca_file", emulator.ca_file)
    extra = str(options.pop("extra_config", ""))
    client_timeout = float(options.pop("client_timeout", 10.0))
    marked_wait = bool(options.pop("wait_for_flags", True))  # never a setting of the agent's
    wait = marked_wait if wait_for_flags is None else wait_for_flags
    strict = options.pop("strict", None)
    if strict is None:
        strict = bool(request.config.getoption("--pushwoosh-strict"))
    elif not isinstance(strict, bool):
        pytest.fail(f"{where}: strict must be True or False, not {strict!r}", pytrace=False)
    agents: List[AgentProcess] = []
    for directory, own in places:
        os.makedirs(directory, exist_ok=True)
        try:
            agent = AgentProcess(directory, server_url=emulator.server_url, settings={**options, **own},
                                 extra_config=extra, client_timeout=client_timeout, strict=strict, lab=emulator.lab)
            request.addfinalizer(agent.close)  # with the fixture that asked for it, started or not
            for holder in started:
                holder.append(agent)
            name = os.path.basename(directory)
            title = f"pushwoosh-agentd {name} log" if name.startswith("fleet-") else "pushwoosh-agentd log"
            _register_log(request.node, title, agent.log_path)
            agents.append(agent.start())
        except (StartError, ValueError) as error:
            pytest.fail(str(error), pytrace=False)
    for agent in agents if wait else []:
        _wait_for_first_refresh(agent)
    return agents


@pytest.fixture
def pushwoosh_agent_process(request: pytest.FixtureRequest, pushwoosh_emulator: RunningEmulator,
                            pushwoosh_tmp_dir: str, _pushwoosh_started: List[AgentProcess]) -> AgentProcess:
    """The running ``pushwoosh-agentd`` behind ``pushwoosh_agent``."""
    return _start_agents(request, pushwoosh_emulator, [_pushwoosh_started], "@pytest.mark.pushwoosh_agent",
                         [(pushwoosh_tmp_dir, {})])[0]


@pytest.fixture
def pushwoosh_agent(pushwoosh_agent_process: AgentProcess) -> AgentClient:
    """An :class:`AgentClient` of a ready ``pushwoosh-agentd`` talking to ``pushwoosh_emulator``, done with its
    first flags request unless ``wait_for_flags=False``; the marker takes the settings and options (README)."""
    return pushwoosh_agent_process.client


@pytest.fixture
def pushwoosh_restart_agent(pushwoosh_agent_process: AgentProcess) -> Callable[..., AgentClient]:
    """``restart(kill=True)``: :meth:`AgentProcess.restart`."""
    return pushwoosh_agent_process.restart


@pytest.fixture
def pushwoosh_http_url(pushwoosh_agent_process: AgentProcess) -> str:
    """``http://127.0.0.1:PORT`` of the agent's HTTP interface (OFREP, /metrics, /readyz)."""
    url = pushwoosh_agent_process.http_url
    if url is None:
        pytest.fail("the agent has no HTTP interface on a TCP port (status has no httpAddress)", pytrace=False)
    return url


@pytest.fixture
def pushwoosh_fleet(request: pytest.FixtureRequest, pushwoosh_emulator: RunningEmulator, pushwoosh_tmp_dir: str,
                    _pushwoosh_started: List[AgentProcess]) -> Callable[..., Fleet]:
    """``pushwoosh_fleet(n, user_ids="fleet-user-{i}", wait_for_flags=None, **settings)``: a :class:`Fleet` of ``n``
    agents, ``i`` with User ID ``user_ids.format(i=i)``, settings (and ``wait_for_flags``) as the marker's."""
    started: List[AgentProcess] = []

    def start(n: int, user_ids: str = "fleet-user-{i}", wait_for_flags: Optional[bool] = None,
              **settings: Any) -> Fleet:
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"pushwoosh_fleet: n must be a positive int, not {n!r}")
        _check_names("pushwoosh_fleet(...)", settings, _AGENT_NAMES)
        users = [user_ids.format(i=i) for i in range(len(started), len(started) + n)]
        places = [(os.path.join(pushwoosh_tmp_dir, f"fleet-{i:03d}"), {"user_id": user})
                  for i, user in enumerate(users, len(started))]
        agents = _start_agents(request, pushwoosh_emulator, [started, _pushwoosh_started], "pushwoosh_fleet(...)",
                               places, settings, wait_for_flags)
        return Fleet(agents, users, pushwoosh_emulator)

    return start


@pytest.fixture
def pushwoosh_lab(pushwoosh_emulator: RunningEmulator, _pushwoosh_started: List[AgentProcess]) -> Lab:
    """A :class:`Lab`: the emulator, every agent the test started, and their clocks moved together."""
    return Lab(pushwoosh_emulator, _pushwoosh_started)


__all__ = ["RunningEmulator", "Fleet", "Lab", "AGENT_FIXTURE_DEFAULTS", "AGENT_FIXTURE_OPTIONS",
           "EMULATOR_FIXTURE_OPTIONS"]
