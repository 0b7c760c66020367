import AgentCore
import AgentWire
import Foundation
import AgentPosix
import LabClock
#if canImport(Glibc)
import Glibc
import ToolSupport
#endif

// `pushwoosh-agentctl fleet advance-clock SPAN --emulator URL`: the lab clock (LabClock, the
// soak runner's) over the emulator and every instance `fleet status` finds.

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

public enum FleetAdvanceClock {
    /// `advance-clock`'s arguments after the command's name.
    static func command(_ arguments: [String], emulator: String?, adminTokenFile: String?) throws(UsageError) -> FleetCommand {
        guard let span = arguments.first else { throw UsageError("'fleet advance-clock' needs SPAN (e.g. 2h, 30min)", command: "fleet") }
        guard arguments.count == 1 else { throw UsageError("unexpected argument \"\(arguments[1])\" for 'fleet advance-clock'", command: "fleet") }
        guard let seconds = TimeSpan.parse(span), seconds > 0 else {
            throw UsageError("advance-clock: \"\(span)\" is not a positive time span (e.g. 2h30min, 30min, 7d)", command: "fleet")
        }
        guard let emulator else { throw UsageError("'fleet advance-clock' needs --emulator URL (the emulator's http://HOST:PORT)", command: "fleet") }
        guard server(emulator) != nil else {
            throw UsageError("--emulator: \"\(emulator)\" is not an http://IPV4:PORT URL of the emulator (e.g. http://127.0.0.1:8080)", command: "fleet")
        }
        return .advanceClock(seconds: seconds, emulator: emulator, adminTokenFile: adminTokenFile)
    }

    /// The emulator's admin server at `url` (`localhost` is 127.0.0.1).
    static func server(_ url: String) -> LoopbackHTTP? {
        let url = url.replacingOccurrences(of: "//localhost:", with: "//127.0.0.1:")
        guard let (server, _) = LoopbackHTTP.parse(url: url), server.host.split(separator: ".").count == 4,
              server.host.split(separator: ".").allSatisfy({ UInt8($0) != nil }) else { return nil }
        return server
    }

    static func run(_ targets: [FleetTarget], seconds: Double, emulator: String, adminTokenFile: String?,
                    invocation: FleetInvocation, output: some ControlOutput) -> ExitCode {
        func fail(_ exit: ExitCode, _ message: String) -> ExitCode {
            output.err("pushwoosh-agentctl: fleet advance-clock: " + message)
            return exit
        }
        guard !targets.isEmpty else { return fail(.notRunning, "no instances to move (none found)") }
        guard var http = server(emulator) else { return fail(.usage, "--emulator: not an http://IPV4:PORT URL: \(emulator)") }
        if let adminTokenFile {
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
        let driver = LabClockDriver(world: FleetLab(targets: targets, emulator: http, timeout: invocation.timeout), labOffset: labOffset)
        let result: LabClockAdvance
        do throws(LabClockError) {
            result = try driver.advance(by: seconds)
        } catch {
            // The driver counts devices from 0: the message names the instance.
            let named = error.device.map { "\(targets[$0].name): " + error.description.replacingOccurrences(of: "device \($0): ", with: "") }
                ?? error.description
            return fail(.notRunning, named)
        }
        output.out(invocation.json ? json(result, targets) : text(result, targets))
        for (i, why) in result.problems.sorted(by: { $0.key < $1.key }) {
            output.err("pushwoosh-agentctl: fleet advance-clock: \(targets[i].name) did not follow: \(why)")
        }
        return result.problems.isEmpty ? .success : .notRunning
    }

    /// `now …`, then one line per fired timer (instance, time, event), then the counts.
    static func text(_ r: LabClockAdvance, _ targets: [FleetTarget]) -> String {
        var rows: [[String]] = []
        for (i, t) in targets.enumerated() {
            let fired = r.fired[i] ?? []
            if fired.isEmpty { rows.append([t.name, "-", "nothing fired"]) }
            for f in fired { rows.append([t.name, SocketTime.string(f.at), f.event + (f.trigger.map { " (\($0.rawValue))" } ?? "")]) }
        }
        let total = r.fired.values.map(\.count).reduce(0, +)
        return "now: \(SocketTime.string(r.now))\n" + FleetOutput.table(rows)
            + "\n\(total) timer\(total == 1 ? "" : "s") fired, \(r.requests) request\(r.requests == 1 ? "" : "s") sent, \(r.steps) step\(r.steps == 1 ? "" : "s")"
    }

    /// `--json`: `{"now", "fired": {INSTANCE: [...]}, "requests", "steps"}`.
    static func json(_ r: LabClockAdvance, _ targets: [FleetTarget]) -> String {
        var fired: [String: JSONValue] = [:]
        for (i, t) in targets.enumerated() { fired[t.name] = .array((r.fired[i] ?? []).map(\.json)) }
        var o: [String: JSONValue] = ["now": SocketTime.json(r.now), "fired": .object(fired),
                                      "requests": .number(Double(r.requests)), "steps": .number(Double(r.steps))]
        if !r.problems.isEmpty {
            o["problems"] = .object(Dictionary(uniqueKeysWithValues: r.problems.map { (targets[$0.key].name, JSONValue.string($0.value)) }))
        }
        return JSONWriter.string(.object(o))
    }
}
