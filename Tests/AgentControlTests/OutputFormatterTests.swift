import AgentCore
import AgentWire
import Foundation
import Testing
@testable import AgentControl

/// The command a command line parses to (the commands are the table's, built by parsing).
private func cmd(_ args: String...) -> ControlCommand {
    guard case .run(let invocation)? = try? ControlArguments.parse(args, environment: [:]) else { preconditionFailure("\(args)") }
    return invocation.command
}

@Suite struct OutputFormatterTests {
    let flagResult: JSONValue = [
        "flag": ["key": "new_checkout", "isEnabled": true, "ruleId": "r_1a2b3c4d",
                 "properties": ["button_color": "green", "max_items": 5, "layout": ["columns": 2]]],
        "reason": "TARGETING_MATCH", "source": "network", "ageSeconds": 150,
    ]

    @Test func get() {
        let (text, exit) = OutputFormatter.format(cmd("get", "new_checkout"), result: flagResult, json: false)
        #expect(exit == .success)
        #expect(text == """
            key:             new_checkout
            enabled:         true
            rule:            r_1a2b3c4d
            properties:
              button_color:  "green"
              layout:        {"columns":2}
              max_items:     5
            reason:          TARGETING_MATCH
            source:          network, 2 min old
            """)
    }

    @Test func getMissingFlag() {
        let r: JSONValue = ["flag": nil, "reason": "ERROR", "errorCode": "PROVIDER_NOT_READY", "source": "none", "ageSeconds": nil]
        #expect(OutputFormatter.format(cmd("get", "x"), result: r, json: false).text == """
            key:     x
            flag:    none
            reason:  ERROR (PROVIDER_NOT_READY)
            source:  none
            """)
    }

    @Test func killedFlag() {
        let r: JSONValue = ["flag": ["key": "k", "isEnabled": false, "ruleId": "", "properties": [:]],
                            "reason": "DISABLED", "source": "cache", "ageSeconds": 7200]
        let text = OutputFormatter.format(cmd("get", "k"), result: r, json: false).text
        #expect(text.contains("rule:        (killed)"))
        #expect(text.contains("properties:  none"))
        #expect(text.contains("source:      cache, 2 h old"))
    }

    @Test func jsonPrintsTheRawResult() {
        let (text, _) = OutputFormatter.format(cmd("get", "new_checkout"), result: flagResult, json: true)
        #expect(text == JSONWriter.string(flagResult))
        #expect(OutputFormatter.format(cmd("is-enabled", "k"), result: ["enabled": true, "reason": "DEFAULT"], json: true).text
            == #"{"enabled":true,"reason":"DEFAULT"}"#)
    }

    @Test func scalarCommands() {
        #expect(OutputFormatter.format(cmd("is-enabled", "k"), result: ["enabled": true], json: false) == ("true", .success))
        #expect(OutputFormatter.format(cmd("is-enabled", "k"), result: ["enabled": false], json: false) == ("false", .success))
        let prop = cmd("property", "k", "p", "--type", "string")
        #expect(OutputFormatter.format(prop, result: ["value": "green"], json: false).text == "green")
        #expect(OutputFormatter.format(prop, result: ["value": 5], json: false).text == "5")
        #expect(OutputFormatter.format(prop, result: ["value": ["a": [1]]], json: false).text == #"{"a":[1]}"#)
        #expect(OutputFormatter.format(prop, result: ["value": nil], json: false).text == "null")
    }

    @Test func refresh() {
        #expect(OutputFormatter.format(cmd("refresh"), result: ["error": nil, "sent": true, "throttledUntil": nil], json: false)
            == ("refresh: sent", .success))
        let failed: JSONValue = ["error": ["domain": "PWFeatureFlagsErrorDomain", "code": 503, "message": "HTTP 503"], "sent": true]
        #expect(OutputFormatter.format(cmd("refresh"), result: failed, json: false)
            == ("refresh failed: HTTP 503 (PWFeatureFlagsErrorDomain code 503)", .agentError))
        #expect(OutputFormatter.format(cmd("refresh"), result: failed, json: true).exit == .agentError)
        // RF-6: answered from the stored flags, and until when; never "ok".
        let throttled: JSONValue = ["error": nil, "sent": false, "throttledUntil": "2026-12-02T10:05:00Z"]
        #expect(OutputFormatter.format(cmd("refresh"), result: throttled, json: false)
            == ("refresh: not sent (throttle window until 2026-12-02T10:05:00Z; the stored flags are in use)", .success))
        #expect(OutputFormatter.warning(cmd("refresh"), result: throttled)
            == "warning: refresh not sent: answered from the stored flags inside the throttle window (until 2026-12-02T10:05:00Z)")
        #expect(OutputFormatter.warning(cmd("refresh"), result: ["error": nil, "sent": true, "throttledUntil": nil]) == nil)
        #expect(OutputFormatter.warning(cmd("refresh"), result: failed) == nil)
        let sent = RefreshAnswer(error: nil, sent: true)
        #expect(OutputFormatter.refresh(sent, changed: ["a", "b"]) == "refresh: sent; changed a, b")
        #expect(OutputFormatter.refresh(sent, changed: []) == "refresh: sent; no flags changed")
        // RF-8: not sent, and failed.
        #expect(OutputFormatter.refresh(RefreshAnswer(error: RefreshError(code: 0, message: "no flags URL"), sent: false), changed: nil)
            == "refresh failed: no flags URL (PWFeatureFlagsErrorDomain code 0) (not sent)")
        // A sent refresh that names a throttle window is not a refresh answer.
        #expect(OutputFormatter.format(cmd("refresh"), result: ["error": nil, "sent": true, "throttledUntil": "2026-12-02T10:05:00Z"], json: false).exit
            == .agentError)
    }

    @Test func fallbackWarningsNameTheCodeAndTheKey() {
        #expect(OutputFormatter.warning(cmd("is-enabled", "nosuchflag"),
                                        result: ["enabled": false, "reason": "ERROR", "errorCode": "FLAG_NOT_FOUND", "source": "network"])
            == #"warning: FLAG_NOT_FOUND: no flag "nosuchflag" in the served flags; printed the default"#)
        #expect(OutputFormatter.warning(cmd("property", "k", "n", "--type", "string"),
                                        result: ["value": "", "reason": "ERROR", "errorCode": "TYPE_MISMATCH"])
            == #"warning: TYPE_MISMATCH: flag "k" has no string property "n" (missing or of another type); printed the default"#)
        #expect(OutputFormatter.warning(cmd("property", "k", "n", "--type", "jsonObject"),
                                        result: ["value": nil, "reason": "ERROR", "errorCode": "TYPE_MISMATCH"])
            == #"warning: TYPE_MISMATCH: flag "k" has no jsonObject property "n" (missing or of another type); printed null"#)
        #expect(OutputFormatter.warning(cmd("is-enabled", "k", "--default", "true"), result: ["enabled": true, "reason": "ERROR", "errorCode": "PROVIDER_NOT_READY"])
            == "warning: PROVIDER_NOT_READY: no valid flags are served (none received yet, or past their lifetime); printed the default")
        #expect(OutputFormatter.warning(cmd("get", "zz"), result: ["flag": nil, "reason": "ERROR", "errorCode": "FLAG_NOT_FOUND"])
            == #"warning: FLAG_NOT_FOUND: no flag "zz" in the served flags; no flag printed"#)
        // The agent's own words when it sends them: a missing property and one of another type told apart.
        #expect(OutputFormatter.warning(cmd("property", "k", "n", "--type", "number", "--default", "7"),
                                        result: ["value": 7, "reason": "ERROR", "errorCode": "TYPE_MISMATCH",
                                                 "errorMessage": #"flag "k" has no property "n""#])
            == #"warning: TYPE_MISMATCH: flag "k" has no property "n"; printed the default"#)
        #expect(OutputFormatter.warning(cmd("property", "k", "n", "--type", "number", "--default", "7"),
                                        result: ["value": 7, "reason": "ERROR", "errorCode": "TYPE_MISMATCH",
                                                 "errorMessage": #"property "n" of flag "k" is a string, not a number"#])
            == #"warning: TYPE_MISMATCH: property "n" of flag "k" is a string, not a number; printed the default"#)
        // A value the agent served: no warning, whatever it is.
        #expect(OutputFormatter.warning(cmd("is-enabled", "k"), result: ["enabled": false, "reason": "DISABLED", "source": "cache"]) == nil)
        #expect(OutputFormatter.warning(cmd("status"), result: ["errorCode": "FLAG_NOT_FOUND"]) == nil)
    }

    @Test func deviceCommands() {
        #expect(OutputFormatter.format(cmd("log-impression", "k"), result: ["logged": true], json: false).text == "impression of k logged")
        #expect(OutputFormatter.format(cmd("log-impression", "k"), result: ["logged": false], json: false).text.hasPrefix("no impression logged"))
        #expect(OutputFormatter.format(cmd("set-user-id", "bob"), result: [:], json: false).text == "User ID set to bob")
        #expect(OutputFormatter.format(cmd("set-app-state", "active"), result: ["sessionStarted": true], json: false).text
            == "app state: active (a new session started)")
        #expect(OutputFormatter.format(cmd("set-app-state", "background"), result: ["sessionStarted": false], json: false).text == "app state: background")
        #expect(OutputFormatter.format(cmd("register-for-push"), result: ["granted": true, "pushToken": "ab12"], json: false).text
            == "push registration: granted, token ab12")
        #expect(OutputFormatter.format(cmd("register-for-push"), result: ["granted": false, "pushToken": nil], json: false).text
            == "push registration: not granted")
        #expect(OutputFormatter.format(cmd("set-notification-authorization", "denied"), result: [:], json: false).text == "notification authorization: denied")
        #expect(OutputFormatter.format(ControlCommand("present-push-primer", .unchecked(.presentPushPrimer, [:])), result: ["outcome": "suppressed", "presentation": nil], json: false).text
            == "outcome:       suppressed\npresentation:  none")
        #expect(OutputFormatter.format(ControlCommand("present-push-primer", .unchecked(.presentPushPrimer, [:])), result: ["outcome": "accepted", "presentation": ["style": "sheet", "position": "bottom"]],
                                       json: false).text == "outcome:     accepted\n  position:  bottom\n  style:     sheet")
    }

    @Test func status() {
        let r: JSONValue = [
            "state": "stale", "version": "0.1.0", "applicationCode": "ABCDE-12345", "hwid": "h1", "userId": "h1",
            "appState": "active", "sessionStartedAt": "2025-05-01T10:00:00Z", "pushRegistered": false, "pushToken": nil,
            "notificationAuthorization": "notDetermined", "flagsCount": 12, "flagsSource": "cache", "flagsAgeSeconds": 7380,
            "flagsExpireAt": "2025-05-02T08:00:00Z", "lastRefreshAt": "2025-05-01T10:02:00Z",
            "lastRefreshError": ["domain": "PWFeatureFlagsErrorDomain", "code": 503, "message": "HTTP 503"],
            "consecutiveFailures": 2, "nextRefreshAt": "2025-05-01T10:06:00Z", "flagsPartial": false, "storageError": nil,
            "extra": true,
        ]
        #expect(OutputFormatter.format(cmd("status"), result: r, json: false).text == """
            state:                      stale
            version:                    0.1.0
            applicationCode:            ABCDE-12345
            hwid:                       h1
            userId:                     h1
            appState:                   active
            sessionStartedAt:           2025-05-01T10:00:00Z
            pushRegistered:             false
            pushToken:                  -
            notificationAuthorization:  notDetermined
            flagsCount:                 12
            flagsSource:                cache
            flagsAgeSeconds:            7380 (2 h 3 min)
            flagsExpireAt:              2025-05-02T08:00:00Z
            flagsPartial:               false
            lastRefreshAt:              2025-05-01T10:02:00Z
            lastRefreshError:           HTTP 503 (PWFeatureFlagsErrorDomain code 503)
            consecutiveFailures:        2
            nextRefreshAt:              2025-05-01T10:06:00Z
            storageError:               -
            extra:                      true
            """)
    }

    /// get, refresh and status are read with the daemon's own answer types: an answer of
    /// another shape is an error (exit 1) naming the field, with the answer as it came.
    @Test func answersOfAnotherShapeNameTheField() {
        let flag: JSONValue = ["flag": ["key": "new_checkout", "enabled": true, "ruleId": "r", "properties": [:]],
                               "reason": "TARGETING_MATCH", "source": "network", "ageSeconds": 150]
        let get = OutputFormatter.format(cmd("get", "new_checkout"), result: flag, json: false)
        #expect(get.exit == .agentError)
        #expect(get.text.hasPrefix("pushwoosh-agentctl: the agent's answer to get is not understood (flag.isEnabled: missing): {"))
        let refresh = OutputFormatter.format(cmd("refresh"), result: ["error": ["domain": "NSURLErrorDomain", "code": 1, "message": "x"], "sent": true],
                                             json: false)
        #expect(refresh.exit == .agentError)
        #expect(refresh.text.contains("(error.domain: expected PWFeatureFlagsErrorDomain, found NSURLErrorDomain)"))
        #expect(OutputFormatter.format(cmd("refresh"), result: ["error": nil], json: true).text.contains("(sent: missing)"))
        let status = OutputFormatter.format(cmd("status"), result: ["state": "ready"], json: false)
        #expect(status.exit == .agentError)
        #expect(status.text.contains("(version: missing)"))
    }

    @Test func clockAndAdvanceClock() {
        let clock: JSONValue = ["now": "2026-12-01T00:53:20Z", "offsetSeconds": 3600.5, "controlled": true,
                                "nextTimerAt": "2026-12-01T01:00:00.250Z", "requestsInFlight": 0]
        #expect(OutputFormatter.format(cmd("clock"), result: clock, json: false) == ("""
            now:                2026-12-01T00:53:20Z
            ahead of the host:  3600.5 s
            controlled:         true
            """, .success))
        let advance: JSONValue = ["now": "2026-12-01T02:00:00Z", "offsetSeconds": 7200, "requests": 1, "fired": [
            ["at": "2026-12-01T01:23:20Z", "event": "sessionEnd"],
            ["at": "2026-12-01T01:53:20Z", "event": "refresh", "trigger": "periodic"],
        ]]
        #expect(OutputFormatter.format(cmd("advance-clock", "3600s"), result: advance, json: false).text == """
            now:                     2026-12-01T02:00:00Z
            requests:                1
            fired:                   2 timer(s)
              2026-12-01T01:23:20Z:  sessionEnd
              2026-12-01T01:53:20Z:  refresh (periodic)
            """)
        let bad = OutputFormatter.format(cmd("clock"), result: ["now": "2026-12-01T00:53:20Z"], json: false)
        #expect(bad.exit == .agentError && bad.text.contains("(offsetSeconds: missing)"), "\(bad.text)")
    }

    @Test func errorsAndExitCodes() {
        #expect(OutputFormatter.format(error: RPCError.permissionDenied(method: "setUserId")).exit == .permissionDenied)
        let invalid = OutputFormatter.format(error: .invalidParams("missing required parameter 'key'", parameter: "key"))
        #expect(invalid == (#"pushwoosh-agentd: error -32602: missing required parameter 'key' {"parameter":"key"}"#, .agentError))
        #expect(OutputFormatter.format(error: .methodNotFound("x")).exit == .agentError)
        #expect(ClientError.connectFailed(errno: ENOENT, path: "/p") == ClientError(exit: .notRunning, message: "pushwoosh-agentd is not running (no socket at /p)"))
        #expect(ClientError.connectFailed(errno: ECONNREFUSED, path: "/p").exit == .notRunning)
        #expect(ClientError.connectFailed(errno: EACCES, path: "/p")
            == ClientError(exit: .permissionDenied, message: "permission denied on /p: join the socket's group"))
        #expect(ClientError.connectFailed(errno: EPERM, path: "/p").exit == .permissionDenied)
        #expect(ExitCode.success.rawValue == 0 && ExitCode.agentError.rawValue == 1 && ExitCode.usage.rawValue == 2
            && ExitCode.notRunning.rawValue == 3 && ExitCode.permissionDenied.rawValue == 4)
    }

    @Test func ages() {
        #expect(OutputFormatter.age(seconds: 42) == "42 s")
        #expect(OutputFormatter.age(seconds: 300) == "5 min")
        #expect(OutputFormatter.age(seconds: 3600) == "1 h")
        #expect(OutputFormatter.age(seconds: 7500) == "2 h 5 min")
        #expect(OutputFormatter.age(seconds: 86400 * 3 + 3600 * 4) == "3 d 4 h")
    }

    @Test func watchLines() {
        let date = Date(timeIntervalSince1970: 1_746_108_187.125)  // 2025-05-01T14:03:07.125Z
        let zone = TimeZone(secondsFromGMT: 2 * 3600)!
        #expect(OutputFormatter.timestamp(date, timeZone: zone) == "2025-05-01T16:03:07.125+02:00")
        // Every line carries the device time of the event, whatever the host's clock says.
        #expect(OutputFormatter.formatNotification(method: "featureFlagsDidUpdate",
                                                   params: ["reason": "refresh", "changed": ["a", "b"], "at": "2026-12-02T10:00:00Z"],
                                                   received: date, timeZone: zone, json: false)
            == "2026-12-02T10:00:00Z refresh: changed a, b")
        #expect(OutputFormatter.formatNotification(method: "featureFlagsDidUpdate", params: ["reason": "expired", "changed": [], "at": "2026-12-02T10:00:00Z"],
                                                   received: date, timeZone: zone, json: false)
            == "2026-12-02T10:00:00Z expired: no flags changed")
        #expect(OutputFormatter.formatNotification(method: "featureFlagsDidUpdate", params: ["reason": "refresh", "changed": ["a"], "at": "2026-12-02T10:00:00Z"],
                                                   received: date, timeZone: zone, json: true)
            == #"{"method":"featureFlagsDidUpdate","params":{"at":"2026-12-02T10:00:00Z","changed":["a"],"reason":"refresh"},"time":"2026-12-02T10:00:00Z"}"#)
        #expect(OutputFormatter.formatNotification(method: "refreshCompleted",
                                                   params: ["trigger": "periodic", "error": nil, "sent": true, "at": "2026-12-02T11:00:00Z"],
                                                   received: date, timeZone: zone, json: false)
            == "2026-12-02T11:00:00Z refresh (periodic): sent")
        #expect(OutputFormatter.formatNotification(method: "refreshCompleted",
                                                   params: ["trigger": "manual", "error": nil, "sent": false, "at": "2026-12-02T11:00:00Z"],
                                                   received: date, timeZone: zone, json: false)
            == "2026-12-02T11:00:00Z refresh (manual): not sent (answered from the stored flags)")
        #expect(OutputFormatter.formatNotification(method: "refreshCompleted",
                                                   params: ["trigger": "retry", "error": ["domain": "PWFeatureFlagsErrorDomain", "code": 503, "message": "HTTP 503"],
                                                            "sent": true, "at": "2026-12-02T11:00:00Z"],
                                                   received: date, timeZone: zone, json: false)
            == "2026-12-02T11:00:00Z refresh (retry): failed: HTTP 503 (PWFeatureFlagsErrorDomain code 503)")
        #expect(OutputFormatter.formatNotification(method: "stateChanged", params: ["state": "stale", "previous": "ready", "at": "2026-12-02T12:00:00Z"],
                                                   received: date, timeZone: zone, json: false)
            == "2026-12-02T12:00:00Z state: stale (was ready)")
        // An agent that does not stamp its updates: the local time it was heard.
        #expect(OutputFormatter.formatNotification(method: "featureFlagsDidUpdate", params: ["reason": "refresh", "changed": ["a"]],
                                                   received: date, timeZone: zone, json: false)
            == "2025-05-01T16:03:07.125+02:00 refresh: changed a")
    }
}
