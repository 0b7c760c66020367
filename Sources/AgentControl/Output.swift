import AgentCore
import AgentWire
import Foundation

/// The CLI's exit status.
public enum ExitCode: Int32, Sendable {
    case success = 0
    /// The agent answered with an error, or a refresh failed.
    case agentError = 1
    case usage = 2
    /// The agent is not running, refused the connection, or stopped answering.
    case notRunning = 3
    /// EACCES on connect, or JSON-RPC -32001.
    case permissionDenied = 4
    /// `--strict`: a read answered with the caller's default (FLAG_NOT_FOUND, TYPE_MISMATCH,
    /// PROVIDER_NOT_READY), or a refresh that was not sent.
    case notAsAsked = 5
}

/// What to print and how to exit. Pure functions of the answer.
public enum OutputFormatter {
    /// The text for a result (no trailing newline) and the exit code.
    /// The answers of `get`, `refresh` and `status` are decoded with AgentWire's types, the ones
    /// the daemon encodes them with: an answer of another shape is an error naming its field.
    public static func format(_ command: ControlCommand, result: JSONValue, json: Bool) -> (text: String, exit: ExitCode) {
        do throws(AnswerError) {
            var exit = ExitCode.success
            if case .typed(.refresh) = command.call, try RefreshAnswer(json: result).error != nil { exit = .agentError }
            if json { return (JSONWriter.string(result), exit) }
            return (try human(command, result), exit)
        } catch {
            return ("pushwoosh-agentctl: the agent's answer to \(command.request.method.rawValue) is not understood (\(error)): "
                    + JSONWriter.string(result), .agentError)
        }
    }

    /// An error answer: message and exit code (-32001 → 4, anything else → 1).
    public static func format(error: RPCError) -> (text: String, exit: ExitCode) {
        var text = "pushwoosh-agentd: error \(error.code): \(Visible.escape(error.message))"
        if let data = error.data, data != .object([:]) { text += " " + JSONWriter.string(data) }
        return (text, error.code == RPCError.permissionDeniedCode ? .permissionDenied : .agentError)
    }

    static func human(_ command: ControlCommand, _ r: JSONValue) throws(AnswerError) -> String {
        try command.definition.print(command, r)
    }

    /// `refresh`: whether it went to the server, and what changed when the keys are known
    /// (`changed`: the `featureFlagsDidUpdate` keys heard while waiting for the answer).
    public static func refresh(_ answer: RefreshAnswer, changed: [String]?) -> String {
        if let error = answer.error { return "refresh failed: " + Visible.escape(error.summary) + (answer.sent ? "" : " (not sent)") }
        guard answer.sent else {
            guard let until = answer.throttledUntil else { return "refresh: not sent (the stored flags are in use)" }
            return "refresh: not sent (throttle window until \(SocketTime.string(until)); the stored flags are in use)"
        }
        guard let changed else { return "refresh: sent" }
        return "refresh: sent; " + (changed.isEmpty ? "no flags changed" : "changed " + changed.map(Visible.escape).joined(separator: ", "))
    }

    /// The standard-error line for a read answered with the caller's default (its `errorCode`),
    /// or a refresh that did not reach the server; nil when the answer is what was asked for.
    public static func warning(_ command: ControlCommand, result: JSONValue) -> String? {
        command.definition.warning(command, result)
    }

    /// A read's warning: the `errorCode` of an answer with the caller's default, what it means
    /// for this read (the agent's `errorMessage`; from an agent that sends none, `what` says it
    /// for FLAG_NOT_FOUND and TYPE_MISMATCH) and what was printed.
    static func readWarning(_ result: JSONValue, printed: String,
                            what: (EvaluationErrorCode) -> String) -> String? {
        guard let code = result["errorCode"]?.stringValue.flatMap(EvaluationErrorCode.init(rawValue:)) else { return nil }
        let reason = result["errorMessage"]?.stringValue
            ?? (code == .providerNotReady ? FallbackMessage.providerNotReady : what(code))
        return "warning: \(code.rawValue): \(reason); \(printed)"
    }

    /// `get`: key, enabled, rule, properties, then provenance.
    static func formatFlag(key: String, _ answer: FlagAnswer) -> String {
        var lines: [(String, String)] = []
        if let flag = answer.flag {
            lines.append(("key", flag.key))
            lines.append(("enabled", flag.isEnabled ? "true" : "false"))
            lines.append(("rule", flag.ruleId.isEmpty ? "(killed)" : flag.ruleId))
            if flag.properties.isEmpty {
                lines.append(("properties", "none"))
            } else {
                lines.append(("properties", ""))
                for name in flag.properties.keys.sorted() { lines.append(("  " + name, JSONWriter.string(flag.properties[name]!))) }
            }
        } else {
            lines.append(("key", key))
            lines.append(("flag", "none"))
        }
        let p = answer.provenance
        lines.append(("reason", p.errorCode.map { "\(p.reason.rawValue) (\($0.rawValue))" } ?? p.reason.rawValue))
        var source = p.source.rawValue
        if let seconds = p.ageSeconds { source += ", \(age(seconds: seconds)) old" }
        lines.append(("source", source))
        return aligned(lines)
    }

    /// `status`: the fields in docs/socket-api.md B.2's order, then any others the agent sent; the age
    /// and the last error read from the decoded answer.
    static func formatStatus(_ r: JSONValue, _ answer: StatusAnswer) -> String {
        let o = r.objectValue ?? [:]
        let known = StatusAnswer.fields.filter { o[$0] != nil }
        let others = o.keys.filter { !StatusAnswer.fields.contains($0) }.sorted()
        let s = answer.status
        let lines = (known + others).map { key -> (String, String) in
            let value = o[key]!
            switch key {
            case _ where value.isNull: return (key, "-")
            case "flagsAgeSeconds": return (key, "\(scalar(value)) (\(s.flagsAgeSeconds.map { age(seconds: $0) } ?? "?"))")
            case "lastRefreshError": return (key, s.lastRefreshError?.summary ?? "-")  // escaped by `aligned`
            case "storageError":
                return (key, s.storageError.map { "\($0.operation.rawValue) failed at \(SocketTime.string($0.at)): \($0.message)" } ?? "-")
            default: return (key, scalar(value))
            }
        }
        return aligned(lines)
    }

    /// A number as JSON writes it (`3600`, `0.5`).
    static func number(_ n: Double) -> String { JSONWriter.string(.number(n)) }

    /// A value for people: strings without quotes, everything else as JSON.
    static func scalar(_ value: JSONValue) -> String {
        if case .string(let s) = value { return Visible.escape(s) }
        return Visible.escape(JSONWriter.string(value))
    }

    /// `name: value` lines with the values in one column.
    static func aligned(_ lines: [(String, String)]) -> String {
        let lines = lines.map { (Visible.escape($0.0), Visible.escape($0.1)) }
        let width = (lines.map(\.0.count).max() ?? 0) + 3
        return lines.map { name, value in
            value.isEmpty ? name + ":" : (name + ":").padding(toLength: width, withPad: " ", startingAt: 0) + value
        }.joined(separator: "\n")
    }

    /// `42 s`, `5 min`, `2 h 5 min`, `3 d 4 h`; `?` for what is not a time.
    public static func age(seconds: Double) -> String {
        seconds.isFinite && seconds >= 0 ? TimeSpan.rough(seconds, parts: 2) : "?"
    }

    /// `watch`: one line per notification, stamped with the device time of the event (the
    /// notification's `at`); `received` in `timeZone` only for an agent that does not say.
    public static func formatNotification(method: String, params: JSONValue, received: Date, timeZone: TimeZone,
                                          json: Bool) -> String {
        let notification = try? SocketNotification(method: method, params: params)
        let stamp = notification?.at.map(SocketTime.string) ?? timestamp(received, timeZone: timeZone)
        if json {
            return JSONWriter.string(["time": .string(stamp), "method": .string(method), "params": params])
        }
        switch notification {
        case .flagsDidUpdate(let reason, let changed, _)?:
            return "\(stamp) \(reason.rawValue): " + (changed.isEmpty ? "no flags changed" : "changed " + changed.map(Visible.escape).joined(separator: ", "))
        case .refreshCompleted(let trigger, let error, let sent, _)?:
            let outcome = error.map { "failed: " + Visible.escape($0.summary) } ?? (sent ? "sent" : "not sent (answered from the stored flags)")
            return "\(stamp) refresh (\(trigger.rawValue)): " + outcome
        case .stateChanged(let state, let previous, _)?:
            return "\(stamp) state: \(state.rawValue)" + (previous.map { " (was \($0.rawValue))" } ?? "")
        case nil:
            return "\(stamp) \(Visible.escape(method)) \(Visible.escape(JSONWriter.string(params)))"
        }
    }

    /// Local ISO 8601 with milliseconds and the offset: `2025-05-01T14:03:07.125+02:00`.
    public static func timestamp(_ date: Date, timeZone: TimeZone) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.timeZone = timeZone
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: date)
    }
}
