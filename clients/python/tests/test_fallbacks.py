"""A fallback is never silent in Python either (docs/python-client.md G): every read that returns
the caller's default warns with FallbackWarning naming the code, the key and the property, or
raises FallbackError from a strict client; details() and property_details() report it as data;
a missing property and one of another type are told apart. Against the real agent."""

from __future__ import annotations

import warnings
from typing import Any, List

import pytest

from pushwoosh_agent import AgentClient, FallbackError, FallbackWarning, FlagDetails, PushwooshError
from pushwoosh_agent.processes import AgentProcess

pytestmark = pytest.mark.pushwoosh_agent(user_id="alice")  # alice: new_checkout's r_qa_team (button_color, max_items)


def _one_warning(record: Any) -> FallbackWarning:
    caught: List[FallbackWarning] = [w.message for w in record if isinstance(w.message, FallbackWarning)]
    assert len(caught) == 1, [str(w) for w in caught]
    return caught[0]


def test_a_missing_flag_warns_naming_the_code_and_the_key(pushwoosh_agent: AgentClient) -> None:
    with pytest.warns(FallbackWarning) as record:
        assert pushwoosh_agent.is_enabled("new_chekout", True) is True
    warning = _one_warning(record)
    assert (warning.code, warning.key, warning.property, warning.value) == ("FLAG_NOT_FOUND", "new_chekout", None, True)
    assert str(warning) == "is_enabled('new_chekout'): FLAG_NOT_FOUND: no flag \"new_chekout\" in the served flags; " \
                           "returned the default True"
    assert isinstance(warning, UserWarning)
    assert record[0].filename == __file__  # it points at the caller's line, not into the client


def test_a_missing_property_and_one_of_another_type_are_told_apart(pushwoosh_agent: AgentClient) -> None:
    with pytest.warns(FallbackWarning) as missing:
        assert pushwoosh_agent.property("new_checkout", "max_itemz", "number", 7) == 7
    with pytest.warns(FallbackWarning) as other:
        assert pushwoosh_agent.property("new_checkout", "button_color", "number", 7) == 7
    a, b = _one_warning(missing), _one_warning(other)
    assert (a.code, a.key, a.property) == ("TYPE_MISMATCH", "new_checkout", "max_itemz")
    assert (b.code, b.key, b.property) == ("TYPE_MISMATCH", "new_checkout", "button_color")
    assert a.message == 'flag "new_checkout" has no property "max_itemz"'
    assert b.message == 'property "button_color" of flag "new_checkout" is a string, not a number'
    assert str(a) == "property('new_checkout', 'max_itemz', 'number'): TYPE_MISMATCH: flag \"new_checkout\" has no " \
                     "property \"max_itemz\"; returned the default 7"
    # And a missing flag behind a property read is a missing flag.
    with pytest.warns(FallbackWarning, match=r"property\('new_chekout', 'max_items', 'number'\): FLAG_NOT_FOUND: "
                                             r"no flag \"new_chekout\" in the served flags; returned the default 7"):
        assert pushwoosh_agent.property("new_chekout", "max_items", "number", 7) == 7


@pytest.mark.parametrize("name, kind, default, found", [
    ("button_color", "number", 1.5, "a string"),
    ("max_items", "string", "x", "a number"),
    ("max_items", "bool", True, "a number"),
    ("max_items", "jsonObject", None, "a number"),
    ("button_color", "jsonArray", None, "a string"),
])
def test_every_typed_read_warns_on_its_fallback(pushwoosh_agent: AgentClient, name: str, kind: str,
                                                default: Any, found: str) -> None:
    with pytest.warns(FallbackWarning) as record:
        value = pushwoosh_agent.property("new_checkout", name, kind, default)
    assert value == default  # the JSON types' fallback is None
    warning = _one_warning(record)
    assert warning.message == f'property "{name}" of flag "new_checkout" is {found}, not a {kind}'
    assert f"property('new_checkout', '{name}', '{kind}')" in str(warning)


def test_reads_that_are_answered_do_not_warn(pushwoosh_agent: AgentClient) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        assert pushwoosh_agent.is_enabled("new_checkout", False) is True
        assert pushwoosh_agent.is_enabled("promo_banner", True) is False  # killed: DISABLED, not a fallback
        assert pushwoosh_agent.property("new_checkout", "max_items", "number", 0) == 10
        assert pushwoosh_agent.property("new_checkout", "button_color", str) == "green"
        assert pushwoosh_agent.get("no_such_flag") is None  # get takes no default: None is its answer
        # details() and property_details() report a fallback as data: no warning.
        assert pushwoosh_agent.details("no_such_flag", True).fallback
        assert pushwoosh_agent.property_details("new_checkout", "nope", "number", 3).fallback


def test_property_details_is_details_for_a_property(pushwoosh_agent: AgentClient) -> None:
    found = pushwoosh_agent.property_details("new_checkout", "max_items", "number", 0)
    assert isinstance(found, FlagDetails)
    assert (found.key, found.property, found.value, found.reason, found.error_code, found.error_message,
            found.source) == ("new_checkout", "max_items", 10, "TARGETING_MATCH", None, None, "network")
    assert found.age_seconds is not None and not found.fallback
    missing = pushwoosh_agent.property_details("new_checkout", "max_itemz", float, 7)
    assert (missing.value, missing.reason, missing.error_code, missing.source, missing.fallback) == \
        (7, "ERROR", "TYPE_MISMATCH", "network", True)
    assert missing.error_message == 'flag "new_checkout" has no property "max_itemz"'
    other = pushwoosh_agent.property_details("new_checkout", "button_color", "number", 7)
    assert other.error_message == 'property "button_color" of flag "new_checkout" is a string, not a number'
    no_flag = pushwoosh_agent.property_details("nope", "x", "string", "d")
    assert (no_flag.value, no_flag.error_code, no_flag.error_message) == \
        ("d", "FLAG_NOT_FOUND", 'no flag "nope" in the served flags')
    layout = pushwoosh_agent.property_details("home_layout", "layout", "json")
    assert layout.value == {"columns": 1, "sections": ["recent", "recommended"]} and layout.reason == "DEFAULT"
    # The flag's details() has the same shape, property None.
    flag = pushwoosh_agent.details("no_such_flag", True)
    assert (flag.property, flag.value, flag.error_code, flag.error_message) == \
        (None, True, "FLAG_NOT_FOUND", 'no flag "no_such_flag" in the served flags')
    with pytest.raises(ValueError, match="type must be one of"):
        pushwoosh_agent.property_details("new_checkout", "max_items", "integer")


def test_the_socket_answer_carries_the_words(pushwoosh_agent: AgentClient) -> None:
    """docs/socket-api.md B.1: errorMessage beside errorCode."""
    missing = pushwoosh_agent.call("property", {"key": "new_checkout", "property": "max_itemz", "type": "number",
                                                "default": 7})
    assert (missing["errorCode"], missing["errorMessage"]) == \
        ("TYPE_MISMATCH", 'flag "new_checkout" has no property "max_itemz"')
    no_flag = pushwoosh_agent.call("isEnabled", {"key": "nope", "default": False})
    assert (no_flag["errorCode"], no_flag["errorMessage"]) == ("FLAG_NOT_FOUND", 'no flag "nope" in the served flags')
    assert "errorMessage" not in pushwoosh_agent.call("isEnabled", {"key": "new_checkout", "default": False})


@pytest.mark.pushwoosh_agent(server_url="http://127.0.0.1:9/json/1.3/", wait_for_flags=False)
def test_no_valid_flags_warns_provider_not_ready(pushwoosh_agent: AgentClient) -> None:
    with pytest.warns(FallbackWarning, match=r"is_enabled\('new_checkout'\): PROVIDER_NOT_READY: no valid flags are "
                                             r"served .*; returned the default False"):
        assert pushwoosh_agent.is_enabled("new_checkout") is False
    with pytest.warns(FallbackWarning, match=r"PROVIDER_NOT_READY") as record:
        assert pushwoosh_agent.property("new_checkout", "layout", "jsonObject") is None
    assert _one_warning(record).property == "layout"


def test_a_strict_client_raises_instead(pushwoosh_agent_process: AgentProcess) -> None:
    with AgentClient(socket=pushwoosh_agent_process.socket_path, strict=True) as strict:
        assert repr(strict).endswith("strict=True)")
        assert strict.is_enabled("new_checkout", False) is True  # answered: no error
        with pytest.raises(FallbackError) as caught:
            strict.is_enabled("new_chekout", False)
        assert (caught.value.code, caught.value.key, caught.value.property, caught.value.value) == \
            ("FLAG_NOT_FOUND", "new_chekout", None, False)
        assert isinstance(caught.value, PushwooshError)
        with pytest.raises(FallbackError, match='flag "new_checkout" has no property "max_itemz"') as caught:
            strict.property("new_checkout", "max_itemz", "number", 7)
        assert (caught.value.code, caught.value.key, caught.value.property) == ("TYPE_MISMATCH", "new_checkout", "max_itemz")
        # details() stays a report, strict or not.
        assert strict.property_details("new_checkout", "max_itemz", "number", 7).value == 7
        strict.strict = False
        with pytest.warns(FallbackWarning):
            strict.is_enabled("new_chekout", False)


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_strict_takes_a_bool_only(pushwoosh_agent_process: AgentProcess, bad: Any) -> None:
    with pytest.raises(TypeError, match=f"strict must be True or False, not {bad!r}"):
        AgentClient(socket=pushwoosh_agent_process.socket_path, strict=bad)
    with pytest.raises(TypeError, match="strict must be True or False"):
        AgentProcess(pushwoosh_agent_process.directory, binary=pushwoosh_agent_process.binary, strict=bad)


# --- The plugin's strict option -------------------------------------------------------------------


def _bin_args(config: pytest.Config) -> list:  # type: ignore[type-arg]
    value = config.getoption("--pushwoosh-bin")
    return ["--pushwoosh-bin", value] if value else []


STRICT_TESTS = '''
import pytest
from pushwoosh_agent import FallbackError, FallbackWarning

@pytest.mark.pushwoosh_agent(strict=True)
def test_marked_strict(pushwoosh_agent):
    assert pushwoosh_agent.strict
    with pytest.raises(FallbackError) as caught:
        pushwoosh_agent.is_enabled("nosuchflag", False)
    assert (caught.value.code, caught.value.key) == ("FLAG_NOT_FOUND", "nosuchflag")

@pytest.mark.pushwoosh_agent(strict=False)
def test_marked_lenient(pushwoosh_agent):
    assert not pushwoosh_agent.strict
    with pytest.warns(FallbackWarning):
        pushwoosh_agent.is_enabled("nosuchflag", False)

def test_unmarked(pushwoosh_agent, pushwoosh_fleet, request):
    strict = request.config.getoption("--pushwoosh-strict")
    assert pushwoosh_agent.strict is strict
    assert pushwoosh_fleet(1).clients[0].strict is strict

def test_fleet_strict(pushwoosh_fleet):
    assert pushwoosh_fleet(1, strict=True).clients[0].strict

@pytest.mark.pushwoosh_agent(strict="yes")
def test_bad_marker(pushwoosh_agent):
    pass

def test_bad_fleet_option(pushwoosh_fleet):
    pushwoosh_fleet(1, strict=1)
'''


@pytest.mark.parametrize("command_line", [[], ["--pushwoosh-strict"]])
def test_the_strict_marker_option_and_the_command_line_option(pytester: pytest.Pytester, pytestconfig: pytest.Config,
                                                               command_line: List[str]) -> None:
    pytester.makepyfile(STRICT_TESTS)
    result = pytester.runpytest_subprocess(*_bin_args(pytestconfig), *command_line, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4, errors=1, failed=1)
    output = result.stdout.str()
    assert "@pytest.mark.pushwoosh_agent: strict must be True or False, not 'yes'" in output
    assert "pushwoosh_fleet(...): strict must be True or False, not 1" in output
    assert "Traceback" not in output and "plugin.py:" not in output, output


def test_the_strict_command_line_option_takes_no_value(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess("--pushwoosh-strict=yes", "-p", "no:cacheprovider")
    assert result.ret != 0
    assert "--pushwoosh-strict" in result.stderr.str()
