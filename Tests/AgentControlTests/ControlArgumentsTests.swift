import AgentCore
import AgentWire
import Testing
@testable import AgentControl

private let env: [String: String] = [:]

private func command(_ args: [String]) throws -> ControlCommand {
    guard case .run(let invocation) = try ControlArguments.parse(args, environment: env) else {
        throw UsageError("help instead of a command")
    }
    return invocation.command
}

private func call(_ args: [String]) throws -> CommandCall { try command(args).call }

private func watch(_ args: [String]) throws -> WatchOptions? { try command(args).watch }

private func requestJSON(_ args: [String]) throws -> String {
    let (method, params) = try command(args).request
    return String(decoding: RPCEncoder.request(id: .number(1), method: method, params: params).dropLast(), as: UTF8.self)
}

private func usageError(_ args: [String]) -> String? {
    do {
        _ = try ControlArguments.parse(args, environment: env)
        return nil
    } catch {
        return error.message
    }
}

@Suite struct ControlArgumentsTests {
    @Test func everyCommandParses() throws {
        #expect(try call(["get", "new_checkout"]) == .typed(.get(key: "new_checkout")))
        #expect(try call(["is-enabled", "k"]) == .typed(.isEnabled(key: "k", default: false)))
        #expect(try call(["is-enabled", "k", "--default", "true"]) == .typed(.isEnabled(key: "k", default: true)))
        #expect(try call(["is-enabled", "--default=yes", "k"]) == .typed(.isEnabled(key: "k", default: true)))
        #expect(try call(["property", "k", "p", "--type", "string"]) == .typed(.property(key: "k", property: "p", type: .string, default: "")))
        #expect(try call(["property", "k", "p", "--type", "number", "--default", "-2.5"])
            == .typed(.property(key: "k", property: "p", type: .number, default: -2.5)))
        #expect(try call(["property", "k", "p", "--type=bool", "--default", "true"])
            == .typed(.property(key: "k", property: "p", type: .bool, default: true)))
        #expect(try call(["property", "k", "p", "--type", "json-object"]) == .typed(.property(key: "k", property: "p", type: .jsonObject, default: .null)))
        #expect(try call(["property", "k", "p", "--type", "json-array"]) == .typed(.property(key: "k", property: "p", type: .jsonArray, default: .null)))
        #expect(try call(["refresh"]) == .typed(.refresh))
        #expect(try call(["log-impression", "k"]) == .typed(.logImpression(key: "k")))
        #expect(try call(["set-user", "alice"]) == .typed(.setUserId("alice")))
        #expect(try call(["set-app-state", "background"]) == .typed(.setAppState(.background)))
        #expect(try call(["register-push"]) == .typed(.registerForPushNotifications))
        #expect(try call(["unregister-push"]) == .typed(.unregisterForPushNotifications))
        #expect(try call(["set-authorization", "provisional"]) == .typed(.setNotificationAuthorization(.provisional)))
        #expect(try call(["status"]) == .typed(.status))
        #expect(try watch(["watch"]) == WatchOptions(events: [.flags], reconnect: false))
        #expect(try watch(["watch", "--events", "flags,refresh,state", "--reconnect"])
            == WatchOptions(events: [.flags, .refresh, .state], reconnect: true))
        #expect(try watch(["watch", "--events=state"]) == WatchOptions(events: [.state], reconnect: false))
        // One vocabulary of property types, three spellings of a JSON object alike.
        for spelling in ["json", "jsonObject", "json-object"] {
            #expect(try call(["property", "k", "p", "--type", spelling]) == .typed(.property(key: "k", property: "p", type: .jsonObject, default: .null)))
        }
        #expect(try call(["property", "k", "p", "--type", "jsonArray"]) == .typed(.property(key: "k", property: "p", type: .jsonArray, default: .null)))
        #expect(try call(["get", "--", "-odd-key"]) == .typed(.get(key: "-odd-key")))
    }

    @Test func primer() throws {
        let c = try command(["primer", "--title", "Stay in the loop", "--message", "Get news", "--accept", "Yes",
                             "--decline", "Later", "--style", "sheet", "--position", "top", "--no-fallback-to-settings",
                             "--min-interval", "86400", "--answer", "accept", "--background-color", "#FFFFFF",
                             "--background-gradient", "#FF0000, #0000FF", "--corner-radius", "12", "--image-url", "https://x/i.png"])
        #expect(c.call == .unchecked(.presentPushPrimer, [
            "title": "Stay in the loop", "message": "Get news", "acceptButton": "Yes", "declineButton": "Later",
            "style": "sheet", "position": "top", "fallbackToSettings": false, "minInterval": 86400, "answer": "accept",
            "backgroundColor": "#FFFFFF", "backgroundGradient": ["#FF0000", "#0000FF"], "cornerRadius": 12,
            "imageURL": "https://x/i.png",
        ]))
        let minimal = try command(["primer", "--title", "T", "--message", "M", "--accept", "A", "--decline", "D"])
        #expect(minimal.call == .unchecked(.presentPushPrimer, ["title": "T", "message": "M", "acceptButton": "A", "declineButton": "D"]))
    }

    @Test func globalOptions() throws {
        guard case .run(let a) = try ControlArguments.parse(["--socket", "/tmp/a.sock", "--json", "status"], environment: env) else {
            Issue.record("no run"); return
        }
        #expect(a == ControlInvocation(socketPath: "/tmp/a.sock", json: true, command: ControlCommand("status", .typed(.status))))
        // After the command too, and --timeout 0 means no limit.
        guard case .run(let b) = try ControlArguments.parse(["get", "k", "--json", "--socket=/tmp/b.sock", "--timeout", "0"], environment: env) else {
            Issue.record("no run"); return
        }
        #expect(b == ControlInvocation(socketPath: "/tmp/b.sock", json: true, timeout: nil, command: ControlCommand("get", .typed(.get(key: "k")))))
    }

    @Test func socketDefaults() {
        #expect(ControlArguments.defaultSocketPath(environment: [:]) == "/run/pushwoosh-agent/agent.sock")
        #expect(ControlArguments.defaultSocketPath(environment: ["RUNTIME_DIRECTORY": "/run/x"]) == "/run/x/agent.sock")
        #expect(ControlArguments.defaultSocketPath(environment: ["RUNTIME_DIRECTORY": "/run/x", "PUSHWOOSH_AGENT_SOCKET": "/tmp/p.sock"])
            == "/tmp/p.sock")
        if case .run(let i)? = try? ControlArguments.parse(["status"], environment: ["PUSHWOOSH_AGENT_SOCKET": "/tmp/e.sock"]) {
            #expect(i.socketPath == "/tmp/e.sock")
        } else {
            Issue.record("no run")
        }
        if case .run(let i)? = try? ControlArguments.parse(["--socket", "/tmp/o.sock", "status"], environment: ["PUSHWOOSH_AGENT_SOCKET": "/tmp/e.sock"]) {
            #expect(i.socketPath == "/tmp/o.sock")
        }
    }

    /// One row per command: no name twice in the table.
    @Test func everyCommandHasOneRowInTheTable() {
        #expect(Set(commandTable.map(\.name)).count == commandTable.count)
    }

    @Test func help() throws {
        guard case .help(let global) = try ControlArguments.parse(["--help"], environment: env) else { Issue.record("no help"); return }
        for name in ["get", "is-enabled", "property", "refresh", "log-impression", "set-user-id", "set-app-state",
                     "register-for-push", "unregister-for-push", "set-notification-authorization", "present-push-primer",
                     "status", "watch"] {
            #expect(global.contains("  \(name) "), "\(name)")
            guard case .help(let text) = try ControlArguments.parse([name, "--help"], environment: env) else {
                Issue.record("no help for \(name)"); continue
            }
            #expect(text.hasPrefix("Usage: pushwoosh-agentctl [--socket PATH] [--json] \(name)"))
        }
        guard case .help = try ControlArguments.parse(["-h"], environment: env) else { Issue.record("-h"); return }
        // Help wins over missing arguments.
        guard case .help = try ControlArguments.parse(["property", "-h"], environment: env) else { Issue.record("property -h"); return }
    }

    @Test(arguments: [
        ([], "no command given"),
        (["frobnicate"], "unknown command 'frobnicate'"),
        // The nearest name, when one is near (a typo, a swap, another spelling of the method).
        (["stauts"], "unknown command 'stauts'; did you mean 'status'?"),
        (["is-enbled", "k"], "unknown command 'is-enbled'; did you mean 'is-enabled'?"),
        (["register-fro-push"], "unknown command 'register-fro-push'; did you mean 'register-for-push'?"),
        (["registerForPushNotifications"], "unknown command 'registerForPushNotifications'; did you mean 'register-for-push'?"),
        (["set_user_id", "a"], "unknown command 'set_user_id'; did you mean 'set-user-id'?"),
        (["primr"], "unknown command 'primr'; did you mean 'primer'?"),
        (["is-enabled", "k", "--defualt", "true"], "unknown option --defualt for 'is-enabled'; did you mean '--default'?"),
        (["--jsn", "status"], "unknown option --jsn; did you mean '--json'?"),
        (["--bogus", "status"], "unknown option --bogus"),
        (["--socket"], "option --socket needs a value"),
        (["--timeout", "soon", "status"], #"--timeout must be a number of seconds, got "soon""#),
        (["get"], "'get' needs KEY"),
        (["get", "a", "b"], #"unexpected argument "b" for 'get'"#),
        (["get", ""], "KEY must not be empty"),
        (["get", "k", "--default", "true"], "unknown option --default for 'get'"),
        (["is-enabled", "k", "--default", "maybe"], #"--default must be true or false, got "maybe""#),
        (["is-enabled", "k", "--default"], "option --default needs a value"),
        (["property", "k", "p"], "'property' needs --type string|number|bool|jsonObject|jsonArray"),
        (["property", "k"], "'property' needs PROP"),
        (["property", "k", "p", "--type", "int"], #"--type must be one of string, number, bool, jsonObject (or json, json-object), jsonArray (or json-array), got "int""#),
        (["property", "k", "p", "--type", "JSON"], #"--type must be one of string, number, bool, jsonObject (or json, json-object), jsonArray (or json-array), got "JSON""#),
        (["status", "--strict"], "unknown option --strict for 'status'"),
        (["set-user", "a", "--strict"], "unknown option --strict for 'set-user-id'"),
        (["refresh", "--strict=yes"], "option --strict takes no value"),
        (["watch", "--events", "flags,changes"], #"--events takes a comma-separated list of flags, refresh, state, got "flags,changes""#),
        (["watch", "--events", ""], #"--events takes a comma-separated list of flags, refresh, state, got """#),
        (["watch", "--reconnect=1"], "option --reconnect takes no value"),
        (["property", "k", "p", "--type", "number", "--default", "x"], #"--default must be a number, got "x""#),
        (["property", "k", "p", "--type", "json-object", "--default", "{}"], "--default is for string, number and bool properties only"),
        (["refresh", "now"], #"unexpected argument "now" for 'refresh'"#),
        (["set-user"], "'set-user-id' needs USERID"),
        (["set-app-state", "foreground"], #"the state must be one of active, background, got "foreground""#),
        (["set-authorization", "yes"], #"the status must be one of notDetermined, denied, authorized, provisional, ephemeral, got "yes""#),
        (["primer", "--title", "T"], "'present-push-primer' needs --message"),
        (["primer", "--title", "T", "--message", "M", "--accept", "A", "--decline", "D", "--style", "popup"],
         #"--style must be one of alert, sheet, got "popup""#),
        (["primer", "--title", "T", "--message", "M", "--accept", "A", "--decline", "D", "--min-interval", "-1"],
         "--min-interval must be 0 or more"),
        (["primer", "--title", "T", "--message", "M", "--accept", "A", "--decline", "D", "--no-fallback-to-settings=1"],
         "option --no-fallback-to-settings takes no value"),
        (["watch", "--json=yes"], "option --json takes no value"),
    ])
    func usageErrors(_ args: [String], _ message: String) {
        #expect(usageError(args) == message)
    }

    /// One name per method: each command's name is the Python client's method name, spelled
    /// the CLI's way; the older CLI names still answer, as the same command.
    @Test func olderNamesAreAliasesOfOneCommand() throws {
        #expect(try call(["register-for-push"]) == .typed(.registerForPushNotifications))
        #expect(try call(["register-push"]) == .typed(.registerForPushNotifications))
        #expect(try call(["unregister-for-push"]) == .typed(.unregisterForPushNotifications))
        #expect(try call(["set-user-id", "alice"]) == .typed(.setUserId("alice")))
        #expect(try call(["set-notification-authorization", "denied"]) == .typed(.setNotificationAuthorization(.denied)))
        #expect(try command(["present-push-primer", "--title", "T", "--message", "M", "--accept", "A", "--decline", "D"])
            == (try command(["primer", "--title", "T", "--message", "M", "--accept", "A", "--decline", "D"])))
        let names = commandTable.flatMap(\.names)
        #expect(Set(names).count == names.count, "a name answers for two commands")
        guard case .help(let usage) = try ControlArguments.parse(["--help"], environment: env) else { Issue.record("no help"); return }
        for d in commandTable {
            for alias in d.aliases {
                #expect(usage.contains(alias) && usage.contains("the same as \(d.name)"), "\(alias)")
                guard case .help(let text) = try ControlArguments.parse([alias, "--help"], environment: env) else { Issue.record("no help for \(alias)"); continue }
                #expect(text == d.help && text.contains("Also answers to: "))
            }
        }
    }

    @Test func nearestNames() {
        #expect(Nearest.name("stauts", among: ["get", "status", "clock"]) == "status")
        #expect(Nearest.name("xyzzy", among: ["get", "status", "clock"]) == nil)
        #expect(Nearest.name("", among: ["get"]) == nil)
        #expect(Nearest.name("GET", among: ["get"]) == "get")
        #expect(Nearest.distance(Array("status"), Array("stauts")) == 1)
        #expect(Nearest.distance(Array("kitten"), Array("sitting")) == 3)
        #expect(Nearest.suggestion("metrcis", among: ["metrics"]) == "; did you mean 'metrics'?")
        #expect(Nearest.suggestion("zzz", among: ["metrics"]) == "")
    }

    @Test func usageErrorPointsToHelp() {
        #expect(UsageError("'get' needs KEY", command: "get").description
            == "pushwoosh-agentctl: 'get' needs KEY\nTry 'pushwoosh-agentctl get --help'.")
        #expect(UsageError("no command given").description == "pushwoosh-agentctl: no command given\nTry 'pushwoosh-agentctl --help'.")
    }

    @Test func requestPerCommand() throws {
        let p = #"{"jsonrpc":"2.0","id":1,"method":"#
        #expect(try requestJSON(["get", "new_checkout"]) == p + #""get","params":{"key":"new_checkout"}}"#)
        #expect(try requestJSON(["is-enabled", "k", "--default", "true"]) == p + #""isEnabled","params":{"default":true,"key":"k"}}"#)
        #expect(try requestJSON(["property", "k", "button_color", "--type", "string", "--default", "blue"])
            == p + #""property","params":{"default":"blue","key":"k","property":"button_color","type":"string"}}"#)
        #expect(try requestJSON(["property", "k", "layout", "--type", "json-object"])
            == p + #""property","params":{"key":"k","property":"layout","type":"jsonObject"}}"#)
        #expect(try requestJSON(["property", "k", "steps", "--type", "json-array"])
            == p + #""property","params":{"key":"k","property":"steps","type":"jsonArray"}}"#)
        #expect(try requestJSON(["property", "k", "n", "--type", "number", "--default", "3"])
            == p + #""property","params":{"default":3,"key":"k","property":"n","type":"number"}}"#)
        #expect(try requestJSON(["refresh"]) == p + #""refresh","params":{}}"#)
        #expect(try requestJSON(["log-impression", "k"]) == p + #""logImpression","params":{"key":"k"}}"#)
        #expect(try requestJSON(["set-user", "alice"]) == p + #""setUserId","params":{"userId":"alice"}}"#)
        #expect(try requestJSON(["set-app-state", "active"]) == p + #""setAppState","params":{"state":"active"}}"#)
        #expect(try requestJSON(["register-push"]) == p + #""registerForPushNotifications","params":{}}"#)
        #expect(try requestJSON(["unregister-push"]) == p + #""unregisterForPushNotifications","params":{}}"#)
        #expect(try requestJSON(["set-authorization", "denied"]) == p + #""setNotificationAuthorization","params":{"status":"denied"}}"#)
        #expect(try requestJSON(["primer", "--title", "T", "--message", "M", "--accept", "A", "--decline", "D", "--answer", "decline"])
            == p + #""presentPushPrimer","params":{"acceptButton":"A","answer":"decline","declineButton":"D","message":"M","title":"T"}}"#)
        #expect(try requestJSON(["status"]) == p + #""status","params":{}}"#)
        #expect(try requestJSON(["watch"]) == p + #""subscribe","params":{}}"#)
        #expect(try requestJSON(["watch", "--events", "refresh,state"]) == p + #""subscribe","params":{"events":["refresh","state"]}}"#)
        #expect(try requestJSON(["property", "k", "layout", "--type", "json"])
            == p + #""property","params":{"key":"k","property":"layout","type":"jsonObject"}}"#)
    }

    // MARK: --instance NAME (docs/fleet.md E) and the default socket

    @Test func instanceResolvesItsSocket() throws {
        guard case .run(let invocation) = try ControlArguments.parse(["--instance", "qa1", "status"], environment: env) else {
            Issue.record("help instead of a command"); return
        }
        // Neither socket exists on a build host: the socket unit's path.
        #expect(invocation.socketPath == "/run/pushwoosh-agent/qa1.sock")
        #expect(ControlArguments.instanceSocketPath("qa1", exists: { $0 == "/run/pushwoosh-agentd@qa1/agent.sock" })
                == "/run/pushwoosh-agentd@qa1/agent.sock")
        #expect(ControlArguments.instanceSocketPath("qa1", exists: { _ in true }) == "/run/pushwoosh-agent/qa1.sock")
        guard case .run(let after) = try ControlArguments.parse(["get", "f", "--instance=b"], environment: env) else {
            Issue.record("help instead of a command"); return
        }
        #expect(after.socketPath == "/run/pushwoosh-agent/b.sock")
    }

    @Test func strictOnReadsAndRefresh() throws {
        for args in [["get", "k"], ["is-enabled", "k"], ["property", "k", "p", "--type", "string"], ["refresh"]] {
            guard case .run(let plain) = try ControlArguments.parse(args, environment: env),
                  case .run(let strict) = try ControlArguments.parse(args + ["--strict"], environment: env),
                  case .run(let before) = try ControlArguments.parse([args[0], "--strict"] + args.dropFirst(), environment: env) else {
                Issue.record("help instead of a command"); return
            }
            #expect(!plain.strict && strict.strict && before.strict, "\(args)")
        }
    }

    @Test func instanceErrors() {
        #expect(usageError(["--instance", "a", "--socket", "/tmp/s", "status"])?.contains("--socket and --instance") == true)
        #expect(usageError(["--instance", "../etc", "status"])?.contains("invalid instance name") == true)
        #expect(usageError(["status", "--instance"])?.contains("needs a value") == true)
    }

    @Test func defaultSocketFallsBackToTheAgentsOwn() {
        #expect(ControlArguments.defaultSocketPath(environment: [:], exists: { _ in false }) == "/run/pushwoosh-agent/agent.sock")
        #expect(ControlArguments.defaultSocketPath(environment: [:], exists: { $0 == "/run/pushwoosh-agentd/agent.sock" })
                == "/run/pushwoosh-agentd/agent.sock")
        #expect(ControlArguments.defaultSocketPath(environment: [:], exists: { _ in true }) == "/run/pushwoosh-agent/agent.sock")
        #expect(ControlArguments.defaultSocketPath(environment: ["PUSHWOOSH_AGENT_SOCKET": "/x.sock"], exists: { _ in true }) == "/x.sock")
    }
}

/// docs/device-clock.md H from the command line.
@Suite struct ClockArgumentsTests {
    @Test func clockAndAdvanceClock() throws {
        #expect(try call(["clock"]) == .typed(.clock))
        #expect(try call(["advance-clock", "23h59min"]) == .typed(.advanceClock(.seconds(86_340))))
        #expect(try call(["advance-clock", "1h 30min"]) == .typed(.advanceClock(.seconds(5_400))))
        #expect(try call(["advance-clock", "--to", "2026-12-24T00:00:00Z"]) == SocketCall.advanceClock(to: "2026-12-24T00:00:00Z").map(CommandCall.typed))
        #expect(try requestJSON(["advance-clock", "30min"]) == #"{"jsonrpc":"2.0","id":1,"method":"advanceClock","params":{"seconds":1800}}"#)
        #expect(try requestJSON(["clock"]) == #"{"jsonrpc":"2.0","id":1,"method":"clock","params":{}}"#)
    }

    @Test(arguments: [["advance-clock"], ["advance-clock", "soon"], ["advance-clock", "0"], ["advance-clock", "-5min"],
                      ["advance-clock", "1h", "2h"], ["advance-clock", "--to", "2026-12-24T00:00:00Z", "1h"], ["clock", "now"]])
    func badClockArgumentsAreUsageErrors(_ args: [String]) {
        #expect(usageError(args) != nil, "\(args)")
    }
}
