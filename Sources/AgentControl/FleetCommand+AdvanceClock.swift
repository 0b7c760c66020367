import AgentCore
import AgentWire
import Foundation
import AgentPosix
import LabClock
#if canImport(Glibc)
import Glibc
import ToolSupport
#endif

// `pushwoosh-agentctl fleet advance-clock SPAN|--until WHEN --emulator URL` (docs/device-clock.md
// J): the lab clock over the emulator and every instance `fleet status` finds. An emulator that
// serves a lab (`--lab DIR`) moves them itself (FleetAdvanceClock+Lab.swift); without one, the
// lab clock (LabClock, the one implementation) runs here, over the emulator's admin API.

/// The lab as agentctl sees it: the instances' sockets and the emulator's admin API.
struct FleetLab: LabClockWorld {
    let targets: [FleetTarget]
    let emulator: LoopbackHTTP
    /// Per `clock` call; an `advanceClock` may take longer (its timers' requests run inside it).
    let timeout: Double

    var deviceCount: Int { targets.count }
    func hostNow() -> Double { Date().timeIntervalSince1970 }
    func pause(seconds: Double) { usleep(UInt32(seconds * 1_000_000)) }

    func call(_ i: Int, _ call: SocketCall, timeout: Double) throws(LabClockError) -> JSONValue {
        let outcome: Result<JSONValue, RPCError>
        do throws(ClientError) {
            outcome = try SocketClient(path: targets[i].socketPath, timeout: timeout).call(method: call.method, params: call.params).outcome
        } catch {
            throw LabClockError(error.message)
        }
        switch outcome {
        case .success(let r): return r
        case .failure(let e): throw LabClockError("\(call.method.rawValue) answered \(e.code): \(e.message)")
        }
    }

    func deviceClock(_ i: Int) -> ClockAnswer? {
        guard let r = try? call(i, .clock, timeout: timeout) else { return nil }
        return try? ClockAnswer(json: r)
    }

    func advanceEmulator(by seconds: Double) throws(LabClockError) { try emulator.advanceEmulatorClock(by: seconds) }

    func advanceDevice(_ i: Int, by seconds: Double) throws(LabClockError) -> AdvanceClockAnswer {
        let r = try call(i, .advanceClock(.seconds(seconds)), timeout: max(timeout, 60))
        do throws(AnswerError) { return try AdvanceClockAnswer(json: r) } catch {
            throw LabClockError("advanceClock answer: \(error)")
        }
    }
}

/// `fleet advance-clock`'s arguments.
public struct FleetAdvance: Sendable, Equatable {
    /// How far: a span, a lab time, or until the next timer or periodic refresh has run (the
    /// lab's `until`, docs/lab.md M.2).
    public enum Until: Sendable, Equatable {
        case seconds(Double)
        case time(Date)
        case nextTimer
        case nextRefresh
    }

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
            or an ISO 8601 time instead of SPAN; an emulator started with
            --lab moves them (each instance attached under its name), else
            agentctl does, saying so; --admin-token FILE: the
            token of an emulator started with --admin-token. Every
            instance it cannot move (down, missing, a clock that is not
            controlled, or one that did not follow a step) is named with
            the reason, and the exit status is 3
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
        // Nothing moves unless every instance runs a controlled clock and the emulator answers;
        // every instance that cannot be moved is named, each with its reason.
        let clocks = FleetCaller.call(targets, method: .clock, params: [:], timeout: invocation.timeout)
        let unmovable = clocks.compactMap { answer -> String? in
            switch answer.outcome {
            case .down(let why): "\(answer.target.name): down (\(why))"
            case .missing(let why): "\(answer.target.name): missing (\(why))"
            case .error(let e): "\(answer.target.name): \(e.message) (\(e.code))"
            case .result: nil
            }
        }
        if !unmovable.isEmpty {
            for why in unmovable { output.err("pushwoosh-agentctl: fleet advance-clock: cannot move \(why)") }
            return fail(.notRunning, "\(unmovable.count) of \(targets.count) instance\(targets.count == 1 ? "" : "s") cannot be moved; nothing was moved")
        }
        let labOffset: Double
        do {
            let clock = try http.json("GET", "/admin/clock")
            guard let offset = clock["offsetSeconds"]?.numberValue else { return fail(.agentError, "the emulator's clock has no offsetSeconds: \(JSONWriter.string(clock))") }
            labOffset = offset
        } catch {
            return fail(.notRunning, "cannot read the emulator's clock at \(emulator): \(error); nothing was moved")
        }
        let result: FleetAdvanced
        switch FleetLabClient(http: http, url: emulator).probe() {
        case .lab(let lab):
            switch lab.advance(targets, advance.until) {
            case .success(let moved): result = moved
            case .failure(let failure): return fail(failure.exit, failure.message)
            }
        case .none:
            output.err("pushwoosh-agentctl: fleet advance-clock: (no lab at \(emulator): moved in-process)")
            switch inProcess(targets, advance.until, http: http, labOffset: labOffset, timeout: invocation.timeout) {
            case .success(let moved): result = moved
            case .failure(let failure): return fail(failure.exit, failure.message)
            }
        case .failed(let failure):
            return fail(failure.exit, failure.message)
        }
        output.out(invocation.json ? json(result, targets) : text(result, targets))
        for (name, why) in result.problems {
            output.err("pushwoosh-agentctl: fleet advance-clock: \(name) did not follow: \(why)")
        }
        return result.problems.isEmpty ? .success : .notRunning
    }

    /// The lab clock run here, over the emulator's admin API and the instances' sockets.
    static func inProcess(_ targets: [FleetTarget], _ until: FleetAdvance.Until, http: LoopbackHTTP, labOffset: Double,
                          timeout: Double) -> Result<FleetAdvanced, FleetAdvanceFailure> {
        let driver = LabClockDriver(world: FleetLab(targets: targets, emulator: http, timeout: timeout), labOffset: labOffset)
        let search = 3.0 * 3600  // past the hour and every RF-12 phase, with room for a retry (as the lab's)
        var result: LabClockAdvance
        do throws(LabClockError) {
            switch until {
            case .seconds(let seconds):
                result = try driver.advance(by: seconds)
            case .time(let time):
                let now = Date(timeIntervalSince1970: driver.labNow())
                guard time > now else {
                    return .failure(FleetAdvanceFailure(.usage, "--until: \(SocketTime.string(time)) is not after the lab's time \(SocketTime.string(now)); nothing was moved"))
                }
                result = try driver.advance(by: time.timeIntervalSince(now))
            case .nextTimer:
                result = try driver.advance(by: search * 8) { $0.steps >= 1 }
            case .nextRefresh:
                result = try driver.advance(by: search) { partial in targets.indices.allSatisfy { hasPeriodicRefresh(partial.fired[$0]) } }
                for i in targets.indices where result.problems[i] == nil && !hasPeriodicRefresh(result.fired[i]) {
                    result.problems[i] = "no periodic refresh within \(TimeSpan.format(search)) of lab time"
                }
            }
        } catch {
            // The driver counts devices from 0: the message names the instance.
            let named = error.device.map { "\(targets[$0].name): " + error.description.replacingOccurrences(of: "device \($0): ", with: "") }
                ?? error.description
            return .failure(FleetAdvanceFailure(.notRunning, named))
        }
        return .success(FleetAdvanced(result, targets))
    }

    static func hasPeriodicRefresh(_ fired: [FiredTimer]?) -> Bool {
        (fired ?? []).contains { $0.event == AgentMachine.TimerKind.refresh.rawValue && $0.trigger == .periodic }
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

/// What an advance did, by instance name (from the lab's answer or the driver's).
struct FleetAdvanced {
    var now: Date
    var fired: [String: [FiredTimer]]
    var requests: Int
    var steps: Int
    /// Instances that could not follow, with the reason, in the order reported.
    var problems: [(name: String, reason: String)]

    init(now: Date, fired: [String: [FiredTimer]], requests: Int, steps: Int, problems: [(name: String, reason: String)]) {
        self.now = now
        self.fired = fired
        self.requests = requests
        self.steps = steps
        self.problems = problems
    }

    init(_ r: LabClockAdvance, _ targets: [FleetTarget]) {
        var fired: [String: [FiredTimer]] = [:]
        for (i, t) in targets.enumerated() { fired[t.name] = r.fired[i] ?? [] }
        self.init(now: r.now, fired: fired, requests: r.requests, steps: r.steps,
                  problems: r.problems.sorted { $0.key < $1.key }.map { (targets[$0.key].name, $0.value) })
    }
}

/// Why an advance stopped: the message and the exit status.
struct FleetAdvanceFailure: Error {
    var exit: ExitCode
    var message: String
    init(_ exit: ExitCode, _ message: String) {
        self.exit = exit
        self.message = message
    }
}
