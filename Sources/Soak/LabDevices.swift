import AgentCore
import AgentWire
import Foundation
import Glibc
import ToolSupport

/// What the soak reads of a lab device's record (DEVICE: AgentWire's `LabDeviceRecord`, the
/// lab's own value).
extension LabDeviceRecord {
    /// `ready`, …, `down`, `starting`, or `exited` once its process ended.
    public var state: String {
        switch condition {
        case .answering(let facts): facts.state ?? ""
        case .exited: "exited"
        case .down: "down"
        case .busy(let phase): phase
        }
    }

    public var exited: Bool { state == "exited" }

    /// Its exit code, when it exited on its own.
    public var exitCode: Int? {
        guard case .exited(_, let code, _) = condition else { return nil }
        return code
    }

    /// How it ended, in the runner's words: `exit code 1`, `killed by signal 11 (SIGSEGV)`.
    public var ended: String {
        guard case .exited(let exit, let code, let signal) = condition else { return "?" }
        if let signal { return "killed by signal \(signal) (\(signalName(Int32(signal))))" }
        if let code { return "exit code \(code)" }
        return exit ?? "?"
    }
}

/// The soak's agents as devices of its lab: the emulator it starts with `--lab` owns them (they
/// are its children), and the runner starts, signals and restarts them, reads their records,
/// logs and notifications, and moves their clocks, all through `/lab/*` (docs/lab.md). Agent
/// `n` is the lab device `agent-n`.
public struct LabDevices: Sendable {
    public let http: LoopbackHTTP

    public init(http: LoopbackHTTP) { self.http = http }

    public static func name(_ agent: Int) -> String { "agent-\(agent)" }

    /// The agent a device name is (`agent-2`: 2).
    public static func agent(_ name: String) -> Int? {
        name.hasPrefix("agent-") ? Int(name.dropFirst(6)) : nil
    }

    func path(_ agent: Int, _ rest: String = "") -> String { "/lab/devices/\(Self.name(agent))" + rest }

    /// Starts and restarts wait for READY=1 (up to the lab's 15 s), an advance for every step.
    var slow: LoopbackHTTP {
        var h = http
        h.timeout = 180
        return h
    }

    /// `POST /lab/devices`: agent `agent` started (in the background, on `config`), once it is ready.
    public func start(_ agent: Int, config: [String: [String: String]], controlled: Bool,
                      environment: [String: String]) throws(EmulatorCallError) -> LabDeviceRecord {
        let body: JSONValue = .object([
            "name": .string(Self.name(agent)), "clock": .string(controlled ? "controlled" : "system"),
            "config": .object(config.mapValues { .object($0.mapValues(JSONValue.string)) }),
            "environment": .object(environment.mapValues(JSONValue.string)),
        ])
        let answer = try slow.json("POST", "/lab/devices", json: body)
        return try record(answer["devices"]?.arrayValue?.first ?? .null, "POST", "/lab/devices")
    }

    /// `POST /lab/devices/NAME/restart`: its process (ended already: the runner stopped it)
    /// started again on its state directory, once it is ready.
    public func restart(_ agent: Int) throws(EmulatorCallError) -> LabDeviceRecord {
        try record(try slow.json("POST", path(agent, "/restart"), json: ["signal": "KILL"]), "POST", path(agent, "/restart"))
    }

    /// `POST /lab/devices/NAME/signal`: `SIGTERM` or `SIGKILL`.
    public func signal(_ agent: Int, _ sig: Int32) throws(EmulatorCallError) {
        _ = try http.json("POST", path(agent, "/signal"), json: ["signal": .string(sig == SIGKILL ? "KILL" : "TERM")])
    }

    /// `GET /lab/devices/NAME`.
    public func record(_ agent: Int) throws(EmulatorCallError) -> LabDeviceRecord {
        try record(try http.json("GET", path(agent)), "GET", path(agent))
    }

    /// A DEVICE read, or the call's error saying what in it was not one.
    private func record(_ json: JSONValue, _ method: String, _ path: String) throws(EmulatorCallError) -> LabDeviceRecord {
        do throws(AnswerError) { return try LabDeviceRecord(json: json) } catch {
            throw EmulatorCallError(method: method, path: path, server: "\(http.host):\(http.port)",
                                    .answered(status: 200, body: "not a DEVICE (\(error)): \(JSONWriter.string(json).prefix(300))"))
        }
    }

    /// The last `lines` lines of its log (`GET /lab/devices/NAME/log`); none when the lab cannot say.
    public func log(_ agent: Int, lines: Int) -> [String] {
        let answer = try? http.json("GET", path(agent, "/log?tail=\(lines)"))
        return answer?["lines"]?.arrayValue?.compactMap(\.stringValue) ?? []
    }

    /// Reads what agent `agent` told its notify socket since the last reading into `log`.
    public func readNotifications(_ agent: Int, into log: NotifyLog) {
        let asked = now()
        guard let answer = try? http.json("GET", path(agent, "/notifications?after=\(log.cursor(agent))")),
              let texts = answer["notifications"]?.arrayValue, let times = answer["times"]?.arrayValue,
              let next = answer["next"]?.numberValue else { return }
        var messages: [NotifyLog.Message] = []
        for (text, time) in zip(texts, times) {
            guard let text = text.stringValue, let at = time.stringValue.flatMap(SocketTime.parse) else { continue }
            messages.append(NotifyLog.Message(time: at.timeIntervalSince1970, text: text))
        }
        log.add(agent, messages, next: Int(next), asked: asked)
    }

    /// `POST /lab/advance`.
    public func advance(_ request: LabAdvanceRequest) throws(LabCallError) -> LabAdvanceAnswer {
        let answer: JSONValue
        do { answer = try slow.json("POST", "/lab/advance", json: request.json) } catch { throw .call(error) }
        do throws(AnswerError) { return try LabAdvanceAnswer(json: answer) } catch { throw .answer(error) }
    }

    /// The emulator's clock offset (`GET /admin/clock`): the lab's time is the host's plus it.
    public func labOffset() throws(LabCallError) -> Double {
        let answer: JSONValue
        do { answer = try http.json("GET", "/admin/clock") } catch { throw .call(error) }
        guard let offset = answer["offsetSeconds"]?.numberValue else { throw .answer(AnswerError("offsetSeconds", "not a number")) }
        return offset
    }
}

/// A lab call that failed, or answered what could not be read.
public enum LabCallError: Error, Sendable, CustomStringConvertible {
    case call(EmulatorCallError)
    case answer(AnswerError)

    public var description: String {
        switch self {
        case .call(let e): "\(e)"
        case .answer(let e): "an unreadable answer: \(e)"
        }
    }
}
