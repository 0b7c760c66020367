import AgentCore
import AgentWire
import FoundationEssentials

/// How the agent describes itself: the `status` method's result (PROTOCOL B.2) and the
/// `STATUS=` line for systemd (PROTOCOL C).
public enum StatusReport {
    public static let version = "0.1.0"

    static func iso(_ date: Date?) -> JSONValue {
        date.map { .string($0.formatted(.iso8601)) } ?? .null
    }

    public static func errorJSON(_ error: RefreshError?) -> JSONValue {
        guard let error else { return .null }
        return ["domain": .string(RefreshError.domain), "code": .number(Double(error.code)), "message": .string(error.message)]
    }

    public static func json(_ s: AgentStatus) -> JSONValue {
        var o: [String: JSONValue] = [
            "state": .string(s.state.rawValue), "version": .string(version),
            "applicationCode": .string(s.applicationCode), "hwid": .string(s.hwid), "userId": .string(s.userId),
            "appState": .string(s.appState.rawValue), "sessionStartedAt": iso(s.sessionStartedAt),
            "pushRegistered": .bool(s.pushRegistered), "pushToken": s.pushToken.map(JSONValue.string) ?? .null,
            "notificationAuthorization": .string(s.notificationAuthorization.rawValue),
            "flagsCount": .number(Double(s.flagsCount)), "flagsSource": .string(s.flagsSource.rawValue),
            "flagsAgeSeconds": s.flagsAgeSeconds.map { .number(($0 * 1000).rounded() / 1000) } ?? .null,
            "flagsExpireAt": iso(s.flagsExpireAt), "lastRefreshAt": iso(s.lastRefreshAt),
            "lastRefreshError": errorJSON(s.lastRefreshError),
            "consecutiveFailures": .number(Double(s.consecutiveFailures)), "nextRefreshAt": iso(s.nextRefreshAt),
        ]
        o["flagsPartial"] = .bool(s.flagsPartial)
        o["storageError"] = s.storageError.map(JSONValue.string) ?? .null
        return .object(o)
    }

    /// A human span: "45 s", "3 min", "2 h", "2 d".
    public static func span(_ seconds: Seconds) -> String {
        let s = min(max(0, seconds), 1e12)  // bounded, so the Int conversions below cannot trap
        if s < 60 { return "\(Int(s)) s" }
        if s < 3600 { return "\(Int(s / 60)) min" }
        if s < 86_400 { return "\(Int(s / 3600)) h" }
        return "\(Int(s / 86_400)) d"
    }

    static func describe(_ error: RefreshError) -> String {
        switch error.code {
        case 0: "no response"
        case 200: "unusable response"
        default: "HTTP \(error.code)"
        }
    }

    /// The `STATUS=` line: what is served, and how the last refresh went.
    public static func line(_ s: AgentStatus, now: Date) -> String {
        var text: String
        let retry = s.nextRefreshAt.map { ", retry in \(span($0.timeIntervalSince(now)))" } ?? ""
        switch s.state {
        case .notReady:
            text = s.refreshInFlight ? "no flags yet; fetching" : "no flags yet"
        case .ready:
            text = "\(s.flagsCount) flags, \(span(s.flagsAgeSeconds ?? 0)) old, last refresh ok"
            if s.flagsPartial { text += " (partial)" }
        case .stale:
            text = "serving \(s.flagsSource == .cache ? "cached " : "")\(s.flagsCount) flags \(span(s.flagsAgeSeconds ?? 0)) old; last refresh failed: \(s.lastRefreshError.map(describe) ?? "?")\(retry)"
        case .error:
            text = "no valid flags; last refresh failed: \(s.lastRefreshError.map(describe) ?? "?")\(retry)"
        case .fatal:
            text = "automatic refresh stopped: \(s.lastRefreshError.map(describe) ?? "?") (check ApplicationCode and ApiToken, then reload)"
            if s.flagsCount > 0 { text += "; serving \(s.flagsCount) flags \(span(s.flagsAgeSeconds ?? 0)) old" }
        }
        if let storage = s.storageError { text += "; state not saved: \(storage)" }
        return text
    }
}
