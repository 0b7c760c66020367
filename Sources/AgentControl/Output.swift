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
}

/// What to print and how to exit. Pure functions of the answer.
public enum OutputFormatter {
    /// The text for a result (no trailing newline) and the exit code.
    public static func format(_ command: ControlCommand, result: JSONValue, json: Bool) -> (text: String, exit: ExitCode) {
        let exit: ExitCode
        if case .refresh = command, let error = result["error"], !error.isNull {
            exit = .agentError
        } else {
            exit = .success
        }
        if json { return (JSONWriter.string(result), exit) }
        return (human(command, result), exit)
    }

    /// An error answer: message and exit code (-32001 → 4, anything else → 1).
    public static func format(error: RPCError) -> (text: String, exit: ExitCode) {
        var text = "pushwoosh-agentd: error \(error.code): \(error.message)"
        if let data = error.data, data != .object([:]) { text += " " + JSONWriter.string(data) }
        return (text, error.code == RPCError.permissionDeniedCode ? .permissionDenied : .agentError)
    }

    static func human(_ command: ControlCommand, _ r: JSONValue) -> String {
        switch command {
        case .get(let key): return formatFlag(key: key, r)
        case .isEnabled: return r["enabled"]?.boolValue.map { $0 ? "true" : "false" } ?? JSONWriter.string(r)
        case .property: return scalar(r["value"] ?? .null)
        case .refresh:
            guard let error = r["error"], !error.isNull else { return "refresh: ok" }
            return "refresh failed: " + describeRefreshError(error)
        case .logImpression(let key):
            return r["logged"]?.boolValue == true
                ? "impression of \(key) logged"
                : "no impression logged (no flag \(key), or already sent this session)"
        case .setUser(let userId): return "User ID set to \(userId)"
        case .setAppState(let state):
            return "app state: \(state.rawValue)" + (r["sessionStarted"]?.boolValue == true ? " (a new session started)" : "")
        case .registerPush:
            guard r["granted"]?.boolValue == true else { return "push registration: not granted" }
            return "push registration: granted, token " + (r["pushToken"]?.stringValue ?? "-")
        case .unregisterPush: return "unregistered from push notifications"
        case .setAuthorization(let status): return "notification authorization: \(status.rawValue)"
        case .primer:
            var lines: [(String, String)] = [("outcome", r["outcome"].map(scalar) ?? "-")]
            if let presentation = r["presentation"]?.objectValue {
                for key in presentation.keys.sorted() { lines.append(("  " + key, scalar(presentation[key]!))) }
            } else {
                lines.append(("presentation", "none"))
            }
            return aligned(lines)
        case .status: return formatStatus(r)
        case .metrics:
            guard var text = r["text"]?.stringValue else { return JSONWriter.string(r) }
            if text.hasSuffix("\n") { text.removeLast() }
            return text
        case .watch: return JSONWriter.string(r)
        case .clock:
            return aligned([("now", r["now"].map(scalar) ?? "-"), ("ahead of the host", r["offsetSeconds"].map(scalar).map { $0 + " s" } ?? "-"),
                            ("controlled", r["controlled"].map(scalar) ?? "-")])
        case .advanceClock:
            var lines = [("now", r["now"].map(scalar) ?? "-"), ("requests", r["requests"].map(scalar) ?? "0")]
            let fired = r["fired"]?.arrayValue ?? []
            lines.append(("fired", "\(fired.count) timer(s)"))
            for f in fired {
                lines.append(("  " + (f["at"].map(scalar) ?? "?"), (f["event"].map(scalar) ?? "?") + (f["trigger"].map { " (\(scalar($0)))" } ?? "")))
            }
            return aligned(lines)
        }
    }

    /// `get`: key, enabled, rule, properties, then provenance.
    static func formatFlag(key: String, _ r: JSONValue) -> String {
        var lines: [(String, String)] = []
        if let flag = r["flag"]?.objectValue {
            lines.append(("key", flag["key"]?.stringValue ?? key))
            lines.append(("enabled", flag["isEnabled"].map(scalar) ?? "-"))
            let rule = flag["ruleId"]?.stringValue
            lines.append(("rule", rule.map { $0.isEmpty ? "(killed)" : $0 } ?? "-"))
            let properties = flag["properties"]?.objectValue ?? [:]
            if properties.isEmpty {
                lines.append(("properties", "none"))
            } else {
                lines.append(("properties", ""))
                for name in properties.keys.sorted() { lines.append(("  " + name, JSONWriter.string(properties[name]!))) }
            }
        } else {
            lines.append(("key", key))
            lines.append(("flag", "none"))
        }
        lines += provenance(r)
        return aligned(lines)
    }

    static func provenance(_ r: JSONValue) -> [(String, String)] {
        var lines: [(String, String)] = []
        if let reason = r["reason"]?.stringValue {
            let code = r["errorCode"]?.stringValue
            lines.append(("reason", code.map { "\(reason) (\($0))" } ?? reason))
        }
        if let source = r["source"]?.stringValue {
            var text = source
            if let seconds = r["ageSeconds"]?.numberValue { text += ", \(age(seconds: seconds)) old" }
            lines.append(("source", text))
        }
        return lines
    }

    /// The status fields in PROTOCOL B.2's order, then any others.
    static let statusOrder = [
        "state", "version", "applicationCode", "hwid", "userId", "appState", "sessionStartedAt", "pushRegistered",
        "pushToken", "notificationAuthorization", "flagsCount", "flagsSource", "flagsAgeSeconds", "flagsExpireAt",
        "lastRefreshAt", "lastRefreshError", "consecutiveFailures", "nextRefreshAt",
    ]

    static func formatStatus(_ r: JSONValue) -> String {
        guard let o = r.objectValue else { return JSONWriter.string(r) }
        let known = statusOrder.filter { o[$0] != nil }
        let others = o.keys.filter { !statusOrder.contains($0) }.sorted()
        let lines = (known + others).map { key -> (String, String) in
            let value = o[key]!
            switch (key, value) {
            case (_, .null): return (key, "-")
            case ("flagsAgeSeconds", .number(let n)): return (key, "\(scalar(value)) (\(age(seconds: n)))")
            case ("lastRefreshError", .object): return (key, describeRefreshError(value))
            default: return (key, scalar(value))
            }
        }
        return aligned(lines)
    }

    static func describeRefreshError(_ error: JSONValue) -> String {
        guard let o = error.objectValue else { return JSONWriter.string(error) }
        let message = o["message"]?.stringValue ?? "unknown error"
        let code = o["code"].map(scalar) ?? "?"
        let domain = o["domain"]?.stringValue ?? "PWFeatureFlagsErrorDomain"
        return "\(message) (\(domain) code \(code))"
    }

    /// A value for people: strings without quotes, everything else as JSON.
    static func scalar(_ value: JSONValue) -> String {
        if case .string(let s) = value { return s }
        return JSONWriter.string(value)
    }

    /// `name: value` lines with the values in one column.
    static func aligned(_ lines: [(String, String)]) -> String {
        let width = (lines.map(\.0.count).max() ?? 0) + 3
        return lines.map { name, value in
            value.isEmpty ? name + ":" : (name + ":").padding(toLength: width, withPad: " ", startingAt: 0) + value
        }.joined(separator: "\n")
    }

    /// `42s`, `5 min`, `2 h 5 min`, `3 d 4 h`.
    public static func age(seconds: Double) -> String {
        guard seconds.isFinite, seconds >= 0 else { return "?" }
        let s = Int(seconds.rounded(.down))
        if s < 60 { return "\(s)s" }
        if s < 3600 { return "\(s / 60) min" }
        if s < 86400 { return s % 3600 / 60 == 0 ? "\(s / 3600) h" : "\(s / 3600) h \(s % 3600 / 60) min" }
        return s % 86400 / 3600 == 0 ? "\(s / 86400) d" : "\(s / 86400) d \(s % 86400 / 3600) h"
    }

    /// `watch`: one line per notification, stamped with the local time.
    public static func formatNotification(method: String, params: JSONValue, at date: Date, timeZone: TimeZone,
                                          json: Bool) -> String {
        let stamp = timestamp(date, timeZone: timeZone)
        if json {
            return JSONWriter.string(["time": .string(stamp), "method": .string(method), "params": params])
        }
        guard method == SocketMethod.flagsDidUpdate else { return "\(stamp) \(method) \(JSONWriter.string(params))" }
        let reason = params["reason"]?.stringValue ?? "?"
        let changed = params["changed"]?.arrayValue?.compactMap(\.stringValue) ?? []
        return "\(stamp) \(reason): " + (changed.isEmpty ? "no flags changed" : "changed " + changed.joined(separator: ", "))
    }

    /// Local ISO 8601 with milliseconds and the offset: `2025-05-01T14:03:07.125+02:00`.
    public static func timestamp(_ date: Date, timeZone: TimeZone) -> String {
        let formatter = ISO8601DateFormatter()
        formatter.timeZone = timeZone
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter.string(from: date)
    }
}
