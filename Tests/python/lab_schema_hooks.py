"""schemathesis hooks of test_lab_schema.py: what a generated request may do to the lab.

Whoever may call the lab runs programs as its user (docs/lab.md, "The token"), and schemathesis
generates whatever the document allows. Before each request is sent, this takes out of it what
would run another program or start many agents, and bounds what would make one request (or the
run) slow; everything else goes as generated, valid or not, and each answer is checked as sent.

- `POST /lab/devices`: no `agentd`, `environment`, `directory`, `extraConfig` or `attach` (only
  the lab's own `--agentd`, the real debug agent, ever runs); `count` at most 2; a valid `name`
  becomes one of two, so that at most a handful of devices live at once (a name in use is a 409).
- A valid device name in a path becomes one of the names those starts give, so that calls,
  restarts, signals, logs and stops meet live devices as often as unknown ones; half the
  application codes and flag keys become config/flags.example.json's, for the same reason.
- Times: `/admin/requests/wait` waits at most 0.2 s; a fault delays at most 20 ms and never
  stalls; the emulator's clock moves at most 10 minutes a request, and the lab's an hour.
- After a generated application, state or removal is taken, the emulator is reset (`POST
  /admin/reset`: back to config/flags.example.json), so that the operations after it meet the
  application and flags the devices use rather than whatever was generated.
"""
import datetime
import os
import re
import urllib.request
import zlib

import schemathesis

NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,39}$")
START_NAMES = ["s0", "s1"]
LIVE_NAMES = ["s0", "s1", "s0-0", "s0-1", "s1-0", "s1-1", "device", "device-0", "device-1"]
NOT_GENERATED = ("agentd", "environment", "directory", "extraConfig", "attach")
APPLICATION = "ABCDE-12345"
FLAGS = ["new_checkout", "promo_banner", "legacy_onboarding", "rich_notifications", "home_layout"]


def number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def pick(names, text):
    """One of `names` for `text`, always the same (and `text` itself when it is one: a case may be sent again)."""
    return text if text in names else names[zlib.crc32(text.encode("utf-8", "surrogatepass")) % len(names)]


def parse_time(value):
    if not isinstance(value, str):
        return None
    try:
        return datetime.datetime.fromtimestamp(float(value), datetime.timezone.utc)
    except (ValueError, OverflowError, OSError):
        pass
    try:
        parsed = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else None


def not_far(value, seconds):
    """An ISO time more than `seconds` ahead of now becomes now plus half of it."""
    when = parse_time(value)
    now = datetime.datetime.now(datetime.timezone.utc)
    try:
        if when is None or when <= now + datetime.timedelta(seconds=seconds):
            return value
    except (OverflowError, TypeError):
        return value
    return (now + datetime.timedelta(seconds=seconds / 2)).strftime("%Y-%m-%dT%H:%M:%SZ")


@schemathesis.hook
def before_call(context, case, **kwargs):
    path, method, body = case.operation.path, case.method.upper(), case.body
    parameters = case.path_parameters or {}
    if isinstance(parameters.get("name"), str) and NAME.match(parameters["name"]):
        parameters["name"] = pick(LIVE_NAMES, parameters["name"])
    for key, known in (("code", [APPLICATION]), ("key", FLAGS)):
        if isinstance(parameters.get(key), str) and zlib.crc32(parameters[key].encode("utf-8", "surrogatepass")) % 2 == 0 \
                or parameters.get(key) in known:
            parameters[key] = pick(known, parameters[key])
    if path == "/lab/devices" and method == "POST" and isinstance(body, dict):
        for key in NOT_GENERATED:
            body.pop(key, None)
        if number(body.get("count")) and body["count"] > 2:
            body["count"] = 2
        if isinstance(body.get("name"), str) and NAME.match(body["name"]):
            body["name"] = pick(START_NAMES, body["name"])
    if path == "/admin/requests/wait":
        query = case.query if isinstance(case.query, dict) else {}
        timeout = query.get("timeout")
        try:
            if timeout is None or float(timeout) > 0.2:
                query["timeout"] = "0.2"
        except (TypeError, ValueError):
            pass  # not a number: a 400
        case.query = query
    if path == "/admin/faults" and method == "POST" and isinstance(body, dict):
        if number(body.get("delayMs")) and body["delayMs"] > 20:
            body["delayMs"] = 20
        body.pop("stallAfterHeaders", None)
    if path == "/admin/clock" and method == "POST" and isinstance(body, dict):
        if number(body.get("advanceSeconds")) and body["advanceSeconds"] > 600:
            body["advanceSeconds"] = 600
        if "set" in body:
            body["set"] = not_far(body["set"], 600)
    if path == "/admin/state" and method == "PUT" and isinstance(body, dict):
        if number(body.get("clockOffsetSeconds")) and body["clockOffsetSeconds"] > 600:
            body["clockOffsetSeconds"] = 600
    if path == "/lab/advance" and method == "POST" and isinstance(body, dict):
        if number(body.get("seconds")) and body["seconds"] > 3600:
            body["seconds"] = 3600
        if "until" in body:
            body["until"] = not_far(body["until"], 3600)


RESET_AFTER = {("PUT", "/admin/state"), ("PUT", "/admin/apps/{code}"), ("DELETE", "/admin/apps/{code}"),
               ("PUT", "/admin/apps/{code}/flags/{key}"), ("DELETE", "/admin/apps/{code}/flags/{key}")}


@schemathesis.hook
def after_call(context, case, response):
    """Each answer's operation and status, one line each, to the file LAB_SCHEMA_ANSWERS names."""
    operation = (case.method.upper(), case.operation.path)
    answers = os.environ.get("LAB_SCHEMA_ANSWERS")
    if answers:
        with open(answers, "a") as f:
            f.write(f"{operation[0]} {operation[1]} {response.status_code}\n")
    if operation in RESET_AFTER and 200 <= response.status_code < 300:
        url = response.request.url.split("/admin/", 1)[0] + "/admin/reset"
        reset = urllib.request.Request(url, method="POST", headers={"Authorization": response.request.headers["Authorization"]})
        with urllib.request.urlopen(reset, timeout=10) as answer:
            assert answer.status == 200
