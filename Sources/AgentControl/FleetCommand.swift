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
        let command = try command(positionals, emulator: emulator, adminToken: adminToken)
        if case .advanceClock = command {} else if emulator != nil || adminToken != nil {
            throw UsageError("\(emulator != nil ? "--emulator" : "--admin-token") is for 'fleet advance-clock'", command: "fleet")
        }
        if case .call = command {} else if strict {
            throw UsageError("--strict is for 'fleet call' (the answers of reads and refresh)", command: "fleet")
        }
        return FleetInvocation(command: command, source: source ?? .manifest(FleetManifest.defaultPath), json: json, timeout: timeout,
                               expected: expected, strict: strict)
    }

    /// The command the positionals name (`status`, `metrics`, `call METHOD [PARAMS-JSON]`,
    /// `advance-clock SPAN`).
    static func command(_ positionals: [String], emulator: String?, adminToken: String?) throws(UsageError) -> FleetCommand {
        guard let name = positionals.first else { throw UsageError("'fleet' needs status, metrics, call or advance-clock", command: "fleet") }
        switch name {
        case "status", "metrics":
            guard positionals.count == 1 else { throw UsageError("unexpected argument \"\(positionals[1])\" for 'fleet \(name)'", command: "fleet") }
            return name == "status" ? .status : .metrics
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
            return .call(method, params)
        case "advance-clock":
            return try FleetAdvanceClock.command(Array(positionals.dropFirst()), emulator: emulator, adminTokenFile: adminToken)
        default:
            throw UsageError("unknown fleet command '\(name)'" + Nearest.suggestion(name, among: ["status", "metrics", "call", "advance-clock"])
                             + " (status, metrics, call or advance-clock)", command: "fleet")
        }
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
