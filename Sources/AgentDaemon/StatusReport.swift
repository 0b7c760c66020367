import AgentCore
import AgentWire
import FoundationEssentials

/// How the agent describes itself: the `status` method's result (docs/socket-api.md B.2) and the
/// `STATUS=` line for systemd (docs/configuration.md C).
public enum StatusReport {
    public static let version = PackageVersion.current

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
        let retry = s.nextRefreshAt.map { ", retry in \(TimeSpan.rough($0.timeIntervalSince(now)))" } ?? ""
        switch s.state {
        case .notReady:
            text = s.refreshInFlight ? "no flags yet; fetching" : "no flags yet"
        case .ready:
            text = "\(s.flagsCount) flags, \(TimeSpan.rough(s.flagsAgeSeconds ?? 0)) old, last refresh ok"
            if s.flagsPartial { text += " (partial)" }
        case .stale:
            text = "serving \(s.flagsSource == .cache ? "cached " : "")\(s.flagsCount) flags \(TimeSpan.rough(s.flagsAgeSeconds ?? 0)) old; last refresh failed: \(s.lastRefreshError.map(describe) ?? "?")\(retry)"
        case .error:
            text = "no valid flags; last refresh failed: \(s.lastRefreshError.map(describe) ?? "?")\(retry)"
        case .fatal:
            text = "automatic refresh stopped: \(s.lastRefreshError.map(describe) ?? "?") (check ApplicationCode and ApiToken, then reload)"
            if s.flagsCount > 0 { text += "; serving \(s.flagsCount) flags \(TimeSpan.rough(s.flagsAgeSeconds ?? 0)) old" }
        }
        if let storage = s.storageError {
            text += storage.operation == .save ? "; state not saved: \(storage.message)" : "; stored state was damaged: \(storage.message)"
        }
        return text
    }
}
