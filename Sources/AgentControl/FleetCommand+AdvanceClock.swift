import AgentCore
import AgentWire
import Foundation
import AgentPosix
#if canImport(Glibc)
import Glibc
import ToolSupport
#endif

// `pushwoosh-agentctl fleet advance-clock SPAN|--until WHEN --emulator URL` (docs/device-clock.md
// J): the lab clock over the emulator and every instance `fleet status` finds, moved by the lab
// of that emulator (`pushwoosh-emulator --lab DIR`, FleetAdvanceClock+Lab.swift), the one
// implementation of the lab clock: agentctl attaches the instances, asks it to move them all or
// none (`"strict": true`), and lets them go.

/// `fleet advance-clock`'s arguments.
public struct FleetAdvance: Sendable, Equatable {
    /// How far: a span, a lab time, or until the next timer or periodic refresh has run (the
    /// lab's `until`, docs/lab.md M.2).
    public typealias Until = LabAdvanceRequest.Until

    public var until: Until
    public var emulator: String
    public var adminTokenFile: String?

    public init(until: Until, emulator: String, adminTokenFile: String? = nil) {
        self.until = until
        self.emulator = emulator
        self.adminTokenFile = adminTokenFile
    }

    public init(seconds: Double, emulator: String, adminTokenFile: String? = nil) {
        self.init(until: .seconds(seconds), emulator: emulator, adminTokenFile: adminTokenFile)
    }
}

public enum FleetAdvanceClock {
    static let form = FleetForm(
        synopsis: "advance-clock SPAN|--until WHEN --emulator URL [--admin-token FILE]",
        help: """
            moves the emulator's clock and every instance's device clock
            (Clock=controlled) SPAN forward together, timer to timer: each
            step ends just after the earliest timer any instance has armed,
            the emulator first, then every instance, once no request is in
            flight; prints the time reached, each instance's fired timers
            and the number of requests sent; --until nextRefresh, nextTimer
            or an ISO 8601 time instead of SPAN; the emulator's lab moves
            them (pushwoosh-emulator --lab DIR; each instance attached
            under its name, then let go); --admin-token FILE: the lab's
            token (DIR/token, or the emulator's --admin-token). All or
            none: every instance it cannot move (down, missing, a clock
            that is not controlled) is named with the reason, nothing
            moves and the exit status is 3; an emulator without a lab is
            a usage error (exit 2)
            """,
        valued: ["--emulator", "--admin-token", "--until"],
        build: { p throws(UsageError) in
            FleetCommand(p.definition, .advanceClock, advance: try advance(p.positionals, until: p.values["--until"],
                                                                            emulator: p.values["--emulator"],
                                                                            adminTokenFile: p.values["--admin-token"]))
        },
        run: { command, targets, invocation, output in
            run(targets, command.advance!, invocation: invocation, output: output)
        })

    /// `advance-clock`'s arguments after the command's name.
    static func advance(_ arguments: [String], until: String? = nil, emulator: String?,
                        adminTokenFile: String?) throws(UsageError) -> FleetAdvance {
        let how: FleetAdvance.Until
        if let until {
            guard arguments.isEmpty else {
                throw UsageError("'fleet advance-clock' takes SPAN or --until, not both (got \"\(arguments[0])\" and --until)", command: "fleet")
            }
            switch until {
            case "nextRefresh": how = .nextRefresh
            case "nextTimer": how = .nextTimer
            default:
                guard let time = SocketTime.parse(until) else {
                    throw UsageError("--until: \"\(until)\" is not nextRefresh, nextTimer or an ISO 8601 time (e.g. 2026-12-06T09:00:00Z)", command: "fleet")
                }
                how = .time(time)
            }
        } else {
            guard let span = arguments.first else { throw UsageError("'fleet advance-clock' needs SPAN (e.g. 2h, 30min)", command: "fleet") }
            guard arguments.count == 1 else { throw UsageError("unexpected argument \"\(arguments[1])\" for 'fleet advance-clock'", command: "fleet") }
            guard let seconds = TimeSpan.parse(span), seconds > 0 else {
                throw UsageError("advance-clock: \"\(span)\" is not a positive time span (e.g. 2h30min, 30min, 7d)", command: "fleet")
            }
            how = .seconds(seconds)
        }
        guard let emulator else { throw UsageError("'fleet advance-clock' needs --emulator URL (the emulator's http://HOST:PORT)", command: "fleet") }
        guard server(emulator) != nil else {
            throw UsageError("--emulator: \"\(emulator)\" is not an http://IPV4:PORT URL of the emulator (e.g. http://127.0.0.1:8080)", command: "fleet")
        }
        return FleetAdvance(until: how, emulator: emulator, adminTokenFile: adminTokenFile)
    }

    /// The emulator's admin server at `url` (`localhost` is 127.0.0.1).
    static func server(_ url: String) -> LoopbackHTTP? {
        let url = url.replacingOccurrences(of: "//localhost:", with: "//127.0.0.1:")
        guard let (server, _) = LoopbackHTTP.parse(url: url), server.host.split(separator: ".").count == 4,
              server.host.split(separator: ".").allSatisfy({ UInt8($0) != nil }) else { return nil }
        return server
    }

    static func fail(_ output: some ControlOutput, _ exit: ExitCode, _ message: String) -> ExitCode {
        output.err("pushwoosh-agentctl: fleet advance-clock: " + message)
        return exit
    }

    static func run(_ targets: [FleetTarget], _ advance: FleetAdvance, invocation: FleetInvocation, output: some ControlOutput) -> ExitCode {
        let emulator = advance.emulator
        func fail(_ exit: ExitCode, _ message: String) -> ExitCode { Self.fail(output, exit, message) }
        guard !targets.isEmpty else { return fail(.notRunning, "no instances to move (none found)") }
        guard var http = server(emulator) else { return fail(.usage, "--emulator: not an http://IPV4:PORT URL: \(emulator)") }
        if let adminTokenFile = advance.adminTokenFile {
            do {
                http.bearerToken = try LoopbackHTTP.bearerToken(file: adminTokenFile)
            } catch {
                return fail(.usage, "--admin-token \(error)")
            }
        }
        let result: FleetAdvanced
        switch FleetLabClient(http: http, url: emulator).probe() {
        case .lab(let lab):
            switch lab.advance(targets, advance.until) {
            case .success(let moved): result = moved
            case .failure(let failure):
                for (name, why) in failure.unmovable { output.err("pushwoosh-agentctl: fleet advance-clock: cannot move \(name): \(why)") }
                return fail(failure.exit, failure.message)
            }
        case .none:
            return fail(.usage, "no lab at \(emulator): the lab moves the fleet; start the emulator with --lab DIR "
                        + "and give its token with --admin-token DIR/token (docs/lab.md); nothing was moved")
        case .failed(let failure):
            return fail(failure.exit, failure.message)
        }
        output.out(invocation.json ? json(result, targets) : text(result, targets))
        for (name, why) in result.problems {
            output.err("pushwoosh-agentctl: fleet advance-clock: \(name) did not follow: \(why)")
        }
        return result.problems.isEmpty ? .success : .notRunning
    }

    /// `now …`, then one line per fired timer (instance, time, event), then the counts.
    static func text(_ r: FleetAdvanced, _ targets: [FleetTarget]) -> String {
        var rows: [[String]] = []
        for t in targets {
            let fired = r.fired[t.name] ?? []
            if fired.isEmpty { rows.append([t.name, "-", "nothing fired"]) }
            for f in fired { rows.append([t.name, SocketTime.string(f.at), f.event + (f.trigger.map { " (\($0.rawValue))" } ?? "")]) }
        }
        let total = targets.map { r.fired[$0.name]?.count ?? 0 }.reduce(0, +)
        return "now: \(SocketTime.string(r.now))\n" + FleetOutput.table(rows)
            + "\n\(total) timer\(total == 1 ? "" : "s") fired, \(r.requests) request\(r.requests == 1 ? "" : "s") sent, \(r.steps) step\(r.steps == 1 ? "" : "s")"
    }

    /// `--json`: `{"now", "fired": {INSTANCE: [...]}, "requests", "steps"}` (and `problems`).
    static func json(_ r: FleetAdvanced, _ targets: [FleetTarget]) -> String {
        var fired: [String: JSONValue] = [:]
        for t in targets { fired[t.name] = .array((r.fired[t.name] ?? []).map(\.json)) }
        var o: [String: JSONValue] = ["now": SocketTime.json(r.now), "fired": .object(fired),
                                      "requests": .number(Double(r.requests)), "steps": .number(Double(r.steps))]
        if !r.problems.isEmpty {
            o["problems"] = .object(Dictionary(r.problems.map { ($0.name, JSONValue.string($0.reason)) }, uniquingKeysWith: { a, _ in a }))
        }
        return JSONWriter.string(.object(o))
    }
}

/// What an advance did, by instance name (the lab's answer).
struct FleetAdvanced {
    var now: Date
    var fired: [String: [FiredTimer]]
    var requests: Int
    var steps: Int
    /// Instances that could not follow, with the reason, in the order reported.
    var problems: [(name: String, reason: String)]

    init(_ answer: LabAdvanceAnswer) {
        now = answer.now
        fired = answer.fired
        requests = answer.requests
        steps = answer.steps
        problems = answer.skipped.map { ($0.name, $0.reason) }
    }
}

/// Why an advance stopped: the message and the exit status.
struct FleetAdvanceFailure: Error {
    var exit: ExitCode
    var message: String
    /// The instances the lab could not move (an advance refused all or none), each with why.
    var unmovable: [(name: String, reason: String)]
    init(_ exit: ExitCode, _ message: String, unmovable: [(name: String, reason: String)] = []) {
        self.exit = exit
        self.message = message
        self.unmovable = unmovable
    }
}
