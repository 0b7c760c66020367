import AgentConfigFile
import AgentCore
import AgentFleet
import AgentWire
import Foundation
#if canImport(Glibc)
import Glibc
#endif

// `pushwoosh-agentctl fleet status | metrics | call METHOD [PARAMS-JSON]` (docs/fleet.md E.1):
// one socket method on every instance of the fleet at once (FleetCaller), answers
// collected and printed in the instances' order.

public enum FleetCommand: Sendable, Equatable {
    case status
    case metrics
    case call(SocketMethod, [String: JSONValue])
    /// `advance-clock SPAN --emulator URL [--admin-token FILE]`: the lab clock over the emulator
    /// and every instance.
    case advanceClock(seconds: Double, emulator: String, adminTokenFile: String?)
}

/// Where the instances are.
public enum FleetSource: Sendable, Equatable {
    /// The instances of a fleet.conf, each at its --instance socket path.
    case manifest(String)
    /// Every `NAME.sock` in a directory (tests, or a fleet outside systemd).
    case socketDirectory(String)
}

public struct FleetInvocation: Sendable, Equatable {
    public var command: FleetCommand
    public var source: FleetSource
    public var json = false
    /// Per instance.
    public var timeout: Double = FleetArguments.defaultTimeout
    /// `--expect NAME,…`: instances that must be there besides the source's; one without a
    /// socket is listed `missing` (exit 3).
    public var expected: [String] = []
    /// `call --strict`: an answer with the caller's default, or a refresh not sent, exits 5.
    public var strict = false
}

public enum FleetArguments {
    public static let defaultTimeout: Double = 10

    public static let usage = """
        Usage: pushwoosh-agentctl fleet [--manifest FILE | --socket-dir DIR] [--expect NAME[,NAME…]]
                                        [--json] [--timeout SECONDS]
                                        status | metrics | call METHOD [PARAMS-JSON] [--strict]
                                        | advance-clock SPAN --emulator URL [--admin-token FILE]

        Asks every instance of the fleet at once (one process, one poll loop), each with
        its own timeout, and prints the answers in the instances' order.

          status    one line per instance: name, state, User ID, flags age, last refresh,
                    failures, the ages in the device's own time (its controlled clock
                    may be ahead of the host's); an instance that does not answer is
                    "down" with the reason, an expected one without a socket "missing"
          metrics   one Prometheus text for all instances: each series gains an instance
                    label, HELP and TYPE once per family; pushwoosh_agent_fleet_up says
                    which instances answered
          call METHOD [PARAMS-JSON] [--strict]
                    one socket method (e.g. refresh, setAppState '{"state":"background"}')
                    on every instance, each answer on its line; a read answered with the
                    caller's default (FLAG_NOT_FOUND, TYPE_MISMATCH, PROVIDER_NOT_READY)
                    or a refresh not sent is named on standard error, and with --strict
                    exits 5
          advance-clock SPAN --emulator URL [--admin-token FILE]
                    moves the emulator's clock and every instance's device clock
                    (Clock=controlled) SPAN forward together, timer to timer: each
                    step ends just after the earliest timer any instance has armed,
                    the emulator first, then every instance, once no request is in
                    flight; prints the time reached, each instance's fired timers
                    and the number of requests sent; --admin-token FILE: the
                    token of an emulator started with --admin-token. Every
                    instance it cannot move (down, missing, a clock that is not
                    controlled, or one that did not follow a step) is named with
                    the reason, and the exit status is 3

        Instances: those of --manifest FILE (default /etc/pushwoosh-agent/fleet.conf), at
        /run/pushwoosh-agent/NAME.sock; without that file, every NAME.sock in
        /run/pushwoosh-agent but agent.sock; with --socket-dir DIR, every NAME.sock in DIR.
        The manifest's instances are expected; --expect names more (with --socket-dir, the
        ones that must be in DIR): an expected instance without a socket, whatever the
        reason, is listed "missing".

        Options:
          --json              one JSON document: an array with each instance's answer
          --timeout SECONDS   per instance (default 10)

        Exit status: 0 every instance answered, 1 some answered with an error (or, for
        call refresh, its refresh failed), 2 usage error, 3 some instance is down or missing
        (advance-clock: some instance could not be moved), 5 with call --strict: some
        instance answered with the caller's default or did not send its refresh.
        """

    /// The options `fleet` takes (for the nearest one to a misspelt option).
    static let options = ["--admin-token", "--emulator", "--expect", "--help", "--json", "--manifest", "--socket-dir",
                          "--strict", "--timeout"]

    /// `arguments` after `fleet`; `json`/`timeout` given before `fleet` carry over.
    public static func parse(_ arguments: [String], json: Bool, timeout: Double?) throws(UsageError) -> FleetInvocation? {
        var source: FleetSource?
        var json = json
        var timeout = timeout ?? defaultTimeout
        var positionals: [String] = []
        var expected: [String] = []
        var emulator: String?
        var adminToken: String?
        var strict = false
        var i = 0
        func value(_ name: String) throws(UsageError) -> String {
            i += 1
            guard i < arguments.count, !arguments[i].isEmpty else { throw UsageError("option \(name) needs a value", command: "fleet") }
            return arguments[i]
        }
        while i < arguments.count {
            let argument = arguments[i]
            if argument.hasPrefix("--"), let eq = argument.firstIndex(of: "=") {
                let name = String(argument[..<eq])
                if ["--json", "--strict", "--help"].contains(name) {
                    throw UsageError("option \(name) takes no value", command: "fleet")
                }
                // --opt=value: handled as two arguments.
                var rest = arguments
                rest[i] = String(argument[..<eq])
                rest.insert(String(argument[argument.index(after: eq)...]), at: i + 1)
                return try parse(rest, json: json, timeout: timeout)
            }
            if argument == "--strict" {  // after PARAMS-JSON too
                strict = true
                i += 1
                continue
            }
            if !positionals.isEmpty, positionals[0] == "call", positionals.count >= 2 {
                // PARAMS-JSON may start with anything; after METHOD only one more argument.
                positionals.append(argument)
                i += 1
                continue
            }
            switch argument {
            case "-h", "--help": return nil
            case "--json": json = true
            case "--manifest", "--socket-dir":
                let v = try value(argument)
                guard source == nil else { throw UsageError("--manifest and --socket-dir name the instances twice; give one", command: "fleet") }
                source = argument == "--manifest" ? .manifest(v) : .socketDirectory(v)
            case "--timeout":
                let v = try value(argument)
                guard let t = Double(v), t > 0, t.isFinite else {
                    throw UsageError("--timeout must be a number of seconds above 0, got \"\(v)\"", command: "fleet")
                }
                timeout = t
            case "--expect":
                for name in try value(argument).split(separator: ",", omittingEmptySubsequences: false).map(String.init) {
                    guard InstanceName.isValid(name) else {
                        throw UsageError("--expect takes instance names separated by commas (letters, digits, '-', '_', '.'), got \"\(name)\"", command: "fleet")
                    }
                    if !expected.contains(name) { expected.append(name) }
                }
            case "--emulator": emulator = try value(argument)
            case "--admin-token": adminToken = try value(argument)
            case "--socket", "--instance":
                throw UsageError("\(argument) names one instance; fleet commands ask them all (--socket-dir DIR to choose where)", command: "fleet")
            default:
                if argument.hasPrefix("-") {
                    throw UsageError("unknown option \(argument) for 'fleet'" + Nearest.suggestion(argument, among: options), command: "fleet")
                }
                positionals.append(argument)
            }
            i += 1
        }
        guard let name = positionals.first else { throw UsageError("'fleet' needs status, metrics, call or advance-clock", command: "fleet") }
        let command: FleetCommand
        switch name {
        case "status", "metrics":
            guard positionals.count == 1 else { throw UsageError("unexpected argument \"\(positionals[1])\" for 'fleet \(name)'", command: "fleet") }
            command = name == "status" ? .status : .metrics
        case "call":
            guard positionals.count >= 2 else { throw UsageError("'fleet call' needs METHOD", command: "fleet") }
            guard let method = SocketMethod(rawValue: positionals[1]) else {
                let methods = SocketMethod.allCases.map(\.rawValue)
                throw UsageError("unknown method '\(positionals[1])'" + Nearest.suggestion(positionals[1], among: methods)
                                 + " (one of \(methods.joined(separator: ", ")))", command: "fleet")
            }
            guard method != .subscribe, method != .unsubscribe else {
                throw UsageError("'fleet call' answers once per instance; \(method.rawValue) needs a connection that stays (use watch)", command: "fleet")
            }
            guard positionals.count <= 3 else { throw UsageError("unexpected argument \"\(positionals[3])\" for 'fleet call'", command: "fleet") }
            var params: [String: JSONValue] = [:]
            if positionals.count == 3 {
                guard let parsed = try? JSONReader.parse(Array(positionals[2].utf8)), let object = parsed.objectValue else {
                    throw UsageError("PARAMS-JSON must be a JSON object, got \(positionals[2])", command: "fleet")
                }
                params = object
            }
            command = .call(method, params)
        case "advance-clock":
            command = try FleetAdvanceClock.command(Array(positionals.dropFirst()), emulator: emulator, adminTokenFile: adminToken)
        default:
            throw UsageError("unknown fleet command '\(name)'" + Nearest.suggestion(name, among: ["status", "metrics", "call", "advance-clock"])
                             + " (status, metrics, call or advance-clock)", command: "fleet")
        }
        if case .advanceClock = command {} else if emulator != nil || adminToken != nil {
            throw UsageError("\(emulator != nil ? "--emulator" : "--admin-token") is for 'fleet advance-clock'", command: "fleet")
        }
        if case .call = command {} else if strict {
            throw UsageError("--strict is for 'fleet call' (the answers of reads and refresh)", command: "fleet")
        }
        return FleetInvocation(command: command, source: source ?? .manifest(FleetManifest.defaultPath), json: json, timeout: timeout,
                               expected: expected, strict: strict)
    }
}

// MARK: - Output

public enum FleetOutput {
    /// The exit status of a set of answers: 3 when any instance is down, 1 when any answered
    /// with an error or (for `refresh`, as `pushwoosh-agentctl refresh`) a failed refresh;
    /// `strict`, when all answered: 5 when any answered not as asked (`notAsAsked`).
    public static func exit(_ answers: [FleetAnswer], method: SocketMethod? = nil, strict: Bool = false) -> ExitCode {
        if answers.contains(where: { if case .down = $0.outcome { true } else if case .missing = $0.outcome { true } else { false } }) {
            return .notRunning
        }
        if answers.contains(where: { if case .error = $0.outcome { true } else { false } }) { return .agentError }
        if method == .refresh, answers.contains(where: { refreshFailed($0.outcome) }) { return .agentError }
        if strict, answers.contains(where: { notAsAsked($0.outcome, method: method) != nil }) { return .notAsAsked }
        return .success
    }

    /// What an answer did other than asked, as `pushwoosh-agentctl --strict` reads it: a read
    /// answered with the caller's default (its `errorCode`), or a refresh that was not sent;
    /// nil otherwise.
    static func notAsAsked(_ outcome: FleetOutcome, method: SocketMethod?) -> String? {
        guard case .result(let r) = outcome else { return nil }
        if let code = r["errorCode"]?.stringValue {
            return code + (r["errorMessage"]?.stringValue.map { ": " + $0 } ?? "")
        }
        if method == .refresh, let answer = try? RefreshAnswer(json: r), answer.error == nil, !answer.sent {
            return "refresh not sent" + (answer.throttledUntil.map { " (throttle window until \(SocketTime.string($0)))" } ?? "")
        }
        return nil
    }

    /// The standard-error line naming every instance that answered not as asked, or nil: a
    /// fallback is never silent, in a fleet either.
    public static func notAsAskedWarning(_ answers: [FleetAnswer], method: SocketMethod?) -> String? {
        let named = answers.compactMap { a in notAsAsked(a.outcome, method: method).map { "\(a.target.name) (\($0))" } }
        guard !named.isEmpty else { return nil }
        let what = method == .refresh ? "did not send the refresh" : "answered with the caller's default"
        return "warning: \(named.count) of \(answers.count) instance\(answers.count == 1 ? "" : "s") \(what): "
            + named.joined(separator: "; ")
    }

    /// A refresh that failed, or whose answer is not a `refresh` result.
    static func refreshFailed(_ outcome: FleetOutcome) -> Bool {
        guard case .result(let r) = outcome else { return false }
        guard let answer = try? RefreshAnswer(json: r) else { return true }
        return answer.error != nil
    }

    /// `--json`: an array, one object per instance.
    public static func json(_ answers: [FleetAnswer]) -> String {
        let items: [JSONValue] = answers.map { a in
            var o: [String: JSONValue] = ["instance": .string(a.target.name), "socket": .string(a.target.socketPath)]
            switch a.outcome {
            case .result(let r): o["result"] = r
            case .error(let e): o["error"] = ["code": .number(Double(e.code)), "message": .string(e.message)]
            case .down(let why): o["down"] = .string(why)
            case .missing(let why): o["missing"] = .string(why)
            }
            return .object(o)
        }
        return JSONWriter.string(.array(items))
    }

    /// `fleet status`: a table, then a summary line. Ages are in each device's own time: its
    /// status' `now` (a controlled clock runs ahead of the host's), else (an agent that does
    /// not say) the host's `now`.
    public static func status(_ answers: [FleetAnswer], now: Date) -> String {
        var rows: [[String]] = [["INSTANCE", "STATE", "USER-ID", "FLAGS-AGE", "LAST-REFRESH", "FAILURES"]]
        var counts: [String: Int] = [:]
        for a in answers {
            switch a.outcome {
            case .result(let r):
                let state = r["state"]?.stringValue ?? "?"
                counts[state, default: 0] += 1
                let age = r["flagsAgeSeconds"]?.numberValue.map { TimeSpan.rough($0) } ?? "-"
                var refresh = "-"
                if let at = r["lastRefreshAt"]?.stringValue, let date = try? Date(at, strategy: .iso8601) {
                    let deviceNow = r["now"]?.stringValue.flatMap { try? Date($0, strategy: .iso8601) } ?? now
                    refresh = TimeSpan.rough(max(0, deviceNow.timeIntervalSince(date))) + " ago"
                }
                if let code = r["lastRefreshError"]?["code"]?.numberValue { refresh += " (failed: \(Int(code)))" }
                let failures = r["consecutiveFailures"]?.numberValue.map { String(Int($0)) } ?? "-"
                rows.append([a.target.name, state, r["userId"]?.stringValue ?? "-", age, refresh, failures])
            case .error(let e):
                counts["error", default: 0] += 1
                rows.append([a.target.name, "error \(e.code): \(e.message)", "-", "-", "-", "-"])
            case .down(let why):
                counts["down", default: 0] += 1
                rows.append([a.target.name, "down (\(why))", "-", "-", "-", "-"])
            case .missing(let why):
                counts["missing", default: 0] += 1
                rows.append([a.target.name, "missing (\(why))", "-", "-", "-", "-"])
            }
        }
        let summary = "\(answers.count) instance\(answers.count == 1 ? "" : "s")"
            + (counts.isEmpty ? "" : ": " + counts.keys.sorted().map { "\(counts[$0]!) \($0)" }.joined(separator: ", "))
        return table(rows) + "\n" + summary
    }

    /// `fleet call`: one line per instance. A `refresh` says whether it was sent (and, when
    /// answered from the throttle window, until when), never a bare "ok".
    public static func call(_ answers: [FleetAnswer], method: SocketMethod? = nil) -> String {
        table(answers.map { a in
            switch a.outcome {
            case .result(let r) where method == .refresh:
                guard let answer = try? RefreshAnswer(json: r) else { return [a.target.name, "not understood", JSONWriter.string(r)] }
                if let error = answer.error { return [a.target.name, "failed", error.summary] }
                if answer.sent { return [a.target.name, "sent", JSONWriter.string(r)] }
                return [a.target.name, "not sent", answer.throttledUntil.map { "throttle window until \(SocketTime.string($0))" } ?? JSONWriter.string(r)]
            case .result(let r): return [a.target.name, "ok", JSONWriter.string(r)]
            case .error(let e): return [a.target.name, "error", "\(e.code) \(e.message)"]
            case .down(let why): return [a.target.name, "down", why]
            case .missing(let why): return [a.target.name, "missing", why]
            }
        })
    }

    static func table(_ rows: [[String]]) -> String {
        let rows = rows.map { $0.map(Visible.escape) }  // output is data: a User ID cannot redraw the table
        guard let columns = rows.map(\.count).max() else { return "" }
        var widths = [Int](repeating: 0, count: columns)
        for row in rows { for (i, cell) in row.enumerated() { widths[i] = max(widths[i], cell.count) } }
        return rows.map { row in
            row.enumerated().map { i, cell in i == row.count - 1 ? cell : cell.padding(toLength: widths[i], withPad: " ", startingAt: 0) }
                .joined(separator: "  ")
        }.joined(separator: "\n")
    }

    /// `fleet metrics`: every instance's text merged, an `instance` label on each series,
    /// HELP and TYPE once per family (the first instance's), families in order of first
    /// appearance, and `pushwoosh_agent_fleet_up` for each instance.
    public static func metrics(_ answers: [FleetAnswer]) -> String {
        var order: [String] = []
        var help: [String: String] = [:]
        var type: [String: String] = [:]
        var samples: [String: [String]] = [:]
        func family(_ name: String) {
            if samples[name] == nil {
                samples[name] = []
                order.append(name)
            }
        }
        var up: [String] = []
        for a in answers {
            let label = "instance=\"\(a.target.name)\""
            guard case .result(let r) = a.outcome, let text = r["text"]?.stringValue else {
                up.append("pushwoosh_agent_fleet_up{\(label)} 0")
                continue
            }
            up.append("pushwoosh_agent_fleet_up{\(label)} 1")
            var current: String?
            for line in text.split(separator: "\n", omittingEmptySubsequences: true) {
                if line.hasPrefix("# HELP ") || line.hasPrefix("# TYPE ") {
                    let parts = line.split(separator: " ", maxSplits: 3)
                    guard parts.count >= 3 else { continue }
                    let name = String(parts[2])
                    family(name)
                    current = name
                    if parts[1] == "HELP" { help[name] = help[name] ?? String(line) } else { type[name] = type[name] ?? String(line) }
                    continue
                }
                if line.hasPrefix("#") { continue }
                let nameEnd = line.firstIndex { $0 == "{" || $0 == " " } ?? line.endIndex
                let name = String(line[..<nameEnd])
                let owner = current.flatMap { name.hasPrefix($0) ? $0 : nil } ?? name
                family(owner)
                let labelled: String
                if nameEnd < line.endIndex, line[nameEnd] == "{" {
                    let inside = line.index(after: nameEnd)
                    labelled = name + "{" + label + (line[inside] == "}" ? "" : ",") + line[inside...]
                } else {
                    labelled = name + "{" + label + "}" + line[nameEnd...]
                }
                samples[owner]!.append(labelled)
            }
        }
        var out: [String] = []
        for name in order {
            if let h = help[name] { out.append(h) }
            if let t = type[name] { out.append(t) }
            out.append(contentsOf: samples[name]!)
        }
        out.append("# HELP pushwoosh_agent_fleet_up Whether the instance answered pushwoosh-agentctl fleet metrics (1) or not (0).")
        out.append("# TYPE pushwoosh_agent_fleet_up gauge")
        out.append(contentsOf: up)
        return out.joined(separator: "\n")
    }
}


// MARK: - Running it

public enum FleetTool {
    public static func run(_ invocation: FleetInvocation, output: some ControlOutput, now: () -> Date) -> ExitCode {
        let targets: [FleetTarget]
        do {
            targets = try FleetTargets.resolve(invocation.source, expecting: invocation.expected)
        } catch {
            output.err("pushwoosh-agentctl: " + error.message)
            return error.exit
        }
        if case .advanceClock(let seconds, let emulator, let tokenFile) = invocation.command {
            return FleetAdvanceClock.run(targets, seconds: seconds, emulator: emulator, adminTokenFile: tokenFile,
                                         invocation: invocation, output: output)
        }
        let (method, params): (SocketMethod, [String: JSONValue]) = switch invocation.command {
        case .advanceClock: preconditionFailure("handled above")
        case .status: (.status, [:])
        case .metrics: (.metrics, [:])
        case .call(let m, let p): (m, p)
        }
        let answers = FleetCaller.call(targets, method: method, params: params, timeout: invocation.timeout)
        if invocation.json {
            output.out(FleetOutput.json(answers))
        } else {
            switch invocation.command {
            case .status: output.out(FleetOutput.status(answers, now: now()))
            case .metrics: output.out(FleetOutput.metrics(answers))
            case .call, .advanceClock: output.out(FleetOutput.call(answers, method: method))
            }
        }
        if case .call = invocation.command, let warning = FleetOutput.notAsAskedWarning(answers, method: method) {
            output.err(warning)
        }
        return FleetOutput.exit(answers, method: method, strict: invocation.strict)
    }
}
