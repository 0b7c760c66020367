"""What the processes share: the binaries, the agent's configuration, temporary directories, a log's tail, secrets."""

from __future__ import annotations

import difflib
import json
import os
import shutil
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .errors import PushwooshError

#: The emulator fixture's application unless told otherwise: the agent's ``config/flags.example.json``.
EXAMPLE_APP_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "example-app.json")
EXAMPLE_APP_CODE = "ABCDE-12345"

#: Settings of :func:`agent_config` and the marker: pythonic name -> (section, key) of the file
#: (docs/configuration.md C.1, F), its sections in the file's order; the keys themselves are accepted too.
_NAMES = {
    "Agent": "application_code api_token server_url user_id socket socket_mode socket_group control_group "
             "max_connections request_read_timeout state_directory request_timeout ca_file proxy",
    "FeatureFlags": "stored_flags_lifetime session_timeout refresh_interval throttle_window disable_throttle",
    "Device": "initial_app_state notification_authorization permission_prompt_answer clock",
    "HTTP": "http_listen http_max_connections http_token_file",
}
#: Each key is its name in CamelCase (``server_url`` ``ServerURL``), without ``[HTTP]``'s ``http_``.
AGENT_SETTINGS: Dict[str, Tuple[str, str]] = {
    name: (section, "".join({"url": "URL", "ca": "CA"}.get(part, part.capitalize())
                            for part in name[len("http_") if section == "HTTP" else 0:].split("_")))
    for section, names in _NAMES.items() for name in names.split()}
#: By key alone: a key in two sections is the first's, written last (``MaxConnections`` is ``[Agent]``'s).
_BY_KEY = {key: (section, key) for section, key in reversed(list(AGENT_SETTINGS.values()))}
_SETTING_NAMES = [*AGENT_SETTINGS, *_BY_KEY]


def unknown_name(what: str, name: object, known: List[str]) -> str:
    """``unknown WHAT 'x'; did you mean 'y'? (known: …)``."""
    text = f"unknown {what} {name!r}"
    nearest = difflib.get_close_matches(str(name), known, n=1, cutoff=0.6) or \
        difflib.get_close_matches(str(name).lower(), [k.lower() for k in known], n=1, cutoff=0.6)
    if nearest:
        suggestion = next((k for k in known if k.lower() == nearest[0].lower()), nearest[0])
        text += f"; did you mean {suggestion!r}?"
    pythonic = sorted(k for k in known if not k[:1].isupper())
    return text + f" (known: {', '.join(pythonic or sorted(known))})"


class StartError(PushwooshError):
    """A binary is missing, or a process did not start (the message has its log's tail)."""


#: The binaries the fixtures run: a directory with neither is not a build's bin directory.
_BINARIES = ("pushwoosh-agentd", "pushwoosh-emulator")

_ABSOLUTE_HINT = ("give the absolute path of the directory that holds pushwoosh-agentd and pushwoosh-emulator: "
                  "the clone's .build/debug, or what `swift build --show-bin-path` prints when run inside the clone")


def find_binary(name: str, bin_dir: Optional[str] = None) -> str:
    """``bin_dir/name`` when ``bin_dir`` is given, else ``name`` from ``PATH``; else a
    :class:`StartError` saying where it looked and what is wrong with that directory."""
    if bin_dir:
        where = os.path.abspath(bin_dir)
        relative = "" if os.path.isabs(bin_dir) else f" ({bin_dir!r} is relative: read from {os.getcwd()})"
        path = os.path.join(where, name)
        if os.access(path, os.X_OK) and os.path.isfile(path):
            return path
        present = [b for b in _BINARIES if os.path.exists(os.path.join(where, b))]
        if not os.path.isdir(where):
            what = "is not a directory" if os.path.exists(where) else "directory does not exist"
            why = f"that {what}{relative}; {_ABSOLUTE_HINT}"
        elif not present:
            why = f"the directory exists but holds neither {' nor '.join(_BINARIES)} (not a build's bin directory; " \
                  f"build with `swift build` in the clone, or {_ABSOLUTE_HINT})"
        elif os.path.exists(path):
            why = f"{path} is there but is not an executable file"
        else:
            why = f"the directory holds {' and '.join(present)} but no {name} (an incomplete build? " \
                  "run `swift build` in the clone)"
        raise StartError(f"{name} not found in {where} (--pushwoosh-bin): {why}")
    found = shutil.which(name)
    if found is None:
        raise StartError(f"{name} is not on PATH: install it or pass --pushwoosh-bin DIR")
    return found


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else f"{round(value * 1000)}ms"
    text = str(value)
    if "\n" in text or "\r" in text:
        raise ValueError(f"a configuration value cannot span lines: {text!r}")
    return text


def config_sections(settings: Mapping[str, Any]) -> Dict[str, Dict[str, str]]:
    """``settings`` as sections of keys and values as the file has them (``yes``/``no``, seconds, a
    fraction in ms; ``None`` left out); an unknown name is a ValueError naming the nearest."""
    sections: Dict[str, Dict[str, str]] = {}
    for name, value in settings.items():
        where = AGENT_SETTINGS.get(name) or _BY_KEY.get(name)
        if where is None:
            raise ValueError(unknown_name("agent setting", name, _SETTING_NAMES))
        if value is not None:
            sections.setdefault(where[0], {})[where[1]] = _value(value)
    return sections


def agent_config(settings: Mapping[str, Any], extra: str = "") -> str:
    """The text of an agent configuration file with ``settings`` (:func:`config_sections`) and ``extra``."""
    sections = config_sections(settings)
    lines: List[str] = ["# written by pushwoosh_agent.processes.agent_config"]
    for section in _NAMES:
        if sections.get(section):
            lines += ["", f"[{section}]"] + [f"{key}={value}" for key, value in sections[section].items()]
    if extra:
        lines += ["", extra.rstrip("\n")]
    return "\n".join(lines) + "\n"


def short_temp_dir(prefix: str = "pwa-") -> str:
    """A new directory whose path leaves room for socket names (sun_path is 108 bytes)."""
    base = tempfile.gettempdir()
    return tempfile.mkdtemp(prefix=prefix, dir=base if len(base) <= 60 else "/tmp")


def tail(path: str, max_bytes: int = 64 * 1024) -> str:
    """The end of a log file (at most ``max_bytes``), or a note that there is none."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError as error:
        return f"({path}: {error.strerror})"
    text = data.decode("utf-8", "replace")
    if size > max_bytes:
        text = f"(… the first {size - max_bytes} bytes left out)\n" + text.split("\n", 1)[-1]
    return text or "(empty)"


def _secret(path: str, text: str) -> str:
    """Writes ``text`` to a 0600 file (a token never goes on a command line); its path."""
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as f:
        f.write(text + "\n")
    return path


def _json_file(directory: str, stem: str, value: Any) -> str:
    """Writes ``value`` (a list, else a mapping) to ``directory/STEM.json``; its path."""
    path = os.path.join(directory, f"{stem}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value if isinstance(value, list) else dict(value), f)
    return path
