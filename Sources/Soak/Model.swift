import AgentCore
import AgentWire
import Foundation

/// Times are Unix seconds (the emulator's request log uses the same wall clock).
public typealias Time = Double

public func now() -> Time { Date().timeIntervalSince1970 }

/// The timings the agents run with (docs/configuration.md C.1 [FeatureFlags]).
public struct Timings: Sendable, Equatable {
    public var lifetime: Double
    public var sessionGap: Double
    public var refresh: Double
    public var throttle: Double

    public init(lifetime: Double = 60, sessionGap: Double = 10, refresh: Double = 15, throttle: Double = 5) {
        self.lifetime = lifetime
        self.sessionGap = sessionGap
        self.refresh = refresh
        self.throttle = throttle
    }

    /// RF-10: a failed automatic refresh is retried no more often than this.
    public var retryFloor: Double { min(60, refresh) }
}

/// An impression's identity (IM-3): flag, rule and state.
public struct ImpressionKey: Sendable, Hashable, CustomStringConvertible {
    public var key: String
    public var ruleId: String
    public var enabled: Bool

    public init(key: String, ruleId: String, enabled: Bool) {
        self.key = key
        self.ruleId = ruleId
        self.enabled = enabled
    }

    public var description: String { "\(key)/\(ruleId.isEmpty ? "\"\"" : ruleId)/\(enabled ? "on" : "off")" }
}

/// One device API call from the emulator's request log (`GET /admin/requests`).
public struct DeviceCall: Sendable, Hashable {
    public var time: Time
    public var method: String
    public var hwid: String
    public var userId: String
    /// HTTP status answered; nil when the connection was dropped.
    public var status: Int?
    /// The fault kind that fired (`http`, `statusCode`, `garbage`, `drop`, `partial`, `delay`).
    public var fault: String?
    /// For `PW_FeatureFlagImpression` events.
    public var impression: ImpressionKey?

    public init(time: Time, method: String, hwid: String, userId: String, status: Int? = 200, fault: String? = nil,
                impression: ImpressionKey? = nil) {
        self.time = time
        self.method = method
        self.hwid = hwid
        self.userId = userId
        self.status = status
        self.fault = fault
        self.impression = impression
    }

    /// Whether the agent got a usable answer (HTTP 200, envelope 200, flags parseable).
    public var succeeded: Bool {
        status == 200 && (fault == nil || fault == "delay" || fault == "partial")
    }

    /// Parses one entry of `GET /admin/requests`.
    public init?(json: JSONValue) {
        guard let time = json["unixTime"]?.numberValue, let method = json["method"]?.stringValue else { return nil }
        let request = json["body"]?["request"]
        self.time = time
        self.method = method
        hwid = request?["hwid"]?.stringValue ?? ""
        userId = request?["userId"]?.stringValue ?? ""
        status = json["status"]?.numberValue.map { Int($0) }
        fault = json["fault"]?.stringValue
        impression = nil
        if method == PushwooshAPI.Method.postEvent.rawValue, request?["event"]?.stringValue == "PW_FeatureFlagImpression",
           let attributes = request?["attributes"], let key = attributes["flag_key"]?.stringValue {
            impression = ImpressionKey(key: key, ruleId: attributes["rule_id"]?.stringValue ?? "",
                                       enabled: attributes["enabled"]?.boolValue ?? false)
        }
    }
}

/// A flag as `get` serves it: the core's own type.
public typealias ServedFlag = FeatureFlag

/// One `get` answer, with when it was asked and answered and whose it should be.
public struct FlagObservation: Sendable {
    public var agent: Int
    public var hwid: String
    public var key: String
    public var sent: Time
    public var received: Time
    /// The User ID the runner set last (the agent's, by then).
    public var expectedUserId: String
    public var flag: ServedFlag?
    public var reason: String
    public var errorCode: String?
    public var source: String
    public var ageSeconds: Double?
    /// Asked right after a `setUserId` (RF-4, ST-2: the previous user's flags must be gone).
    public var afterUserSwitch = false

    public init(agent: Int, hwid: String, key: String, sent: Time, received: Time, expectedUserId: String,
                flag: ServedFlag?, reason: String, errorCode: String? = nil, source: String, ageSeconds: Double?) {
        self.agent = agent
        self.hwid = hwid
        self.key = key
        self.sent = sent
        self.received = received
        self.expectedUserId = expectedUserId
        self.flag = flag
        self.reason = reason
        self.errorCode = errorCode
        self.source = source
        self.ageSeconds = ageSeconds
    }

    /// From a `get` result, decoded as the agent encodes it (AgentWire's `FlagAnswer`).
    public init(agent: Int, hwid: String, key: String, sent: Time, received: Time, expectedUserId: String,
                result: JSONValue) throws(AnswerError) {
        let answer = try FlagAnswer(json: result)
        let p = answer.provenance
        self.init(agent: agent, hwid: hwid, key: key, sent: sent, received: received, expectedUserId: expectedUserId,
                  flag: answer.flag, reason: p.reason.rawValue, errorCode: p.errorCode?.rawValue, source: p.source.rawValue,
                  ageSeconds: p.ageSeconds)
    }

    /// Whether flags were being served (a set was loaded, whether or not it holds `key`).
    public var flagsServed: Bool { ageSeconds != nil }
}

/// One `status` answer.
public struct StatusObservation: Sendable {
    public var agent: Int
    public var sent: Time
    public var received: Time
    public var expectedUserId: String
    public var expectedActive: Bool
    public var state: String
    public var userId: String
    public var appState: String
    public var flagsCount: Int
    public var flagsAgeSeconds: Double?
    public var flagsExpireAt: Time?
    public var consecutiveFailures: Int
    /// `network`, `cache` or `none`.
    public var flagsSource = "none"
    /// ST-5: partial flags are not written to disk.
    public var flagsPartial = false

    public init(agent: Int, sent: Time, received: Time, expectedUserId: String, expectedActive: Bool, state: String,
                userId: String, appState: String, flagsCount: Int, flagsAgeSeconds: Double?, flagsExpireAt: Time?,
                consecutiveFailures: Int = 0, flagsSource: String = "none", flagsPartial: Bool = false) {
        self.agent = agent
        self.sent = sent
        self.received = received
        self.expectedUserId = expectedUserId
        self.expectedActive = expectedActive
        self.state = state
        self.userId = userId
        self.appState = appState
        self.flagsCount = flagsCount
        self.flagsAgeSeconds = flagsAgeSeconds
        self.flagsExpireAt = flagsExpireAt
        self.consecutiveFailures = consecutiveFailures
        self.flagsSource = flagsSource
        self.flagsPartial = flagsPartial
    }

    /// From a `status` result, decoded as the agent encodes it (AgentWire's `StatusAnswer`).
    public init(agent: Int, sent: Time, received: Time, expectedUserId: String, expectedActive: Bool,
                result: JSONValue) throws(AnswerError) {
        let s = try StatusAnswer(json: result).status
        self.init(agent: agent, sent: sent, received: received, expectedUserId: expectedUserId, expectedActive: expectedActive,
                  state: s.state.rawValue, userId: s.userId, appState: s.appState.rawValue, flagsCount: s.flagsCount,
                  flagsAgeSeconds: s.flagsAgeSeconds, flagsExpireAt: s.flagsExpireAt?.timeIntervalSince1970,
                  consecutiveFailures: s.consecutiveFailures, flagsSource: s.flagsSource.rawValue, flagsPartial: s.flagsPartial)
    }
}

/// ISO 8601 UTC (`2024-05-01T12:00:00Z`, with or without fractional seconds).
public func parseISO8601(_ text: String) -> Time? {
    let plain = ISO8601DateFormatter()
    if let d = plain.date(from: text) { return d.timeIntervalSince1970 }
    let fractional = ISO8601DateFormatter()
    fractional.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    return fractional.date(from: text)?.timeIntervalSince1970
}

public func iso8601(_ t: Time) -> String {
    let f = ISO8601DateFormatter()
    f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    return f.string(from: Date(timeIntervalSince1970: t))
}

/// Something the runner did to an agent, between `start` (request sent) and `end` (answered).
public struct AgentAction: Sendable {
    public enum Kind: Sendable, Equatable {
        /// `setUserId` with a different id.
        case userChanged(String)
        /// `setAppState active` that started a session.
        case sessionStarted
        /// `setAppState`; `active` false: background.
        case appState(active: Bool)
        /// `refresh` (may or may not have sent a request).
        case manualRefresh
        /// `registerForPushNotifications` that was granted (may send `registerDevice` and then refresh, RF-3).
        case pushRegistration
        /// The process was signalled (`SIGTERM`/`SIGKILL`); it is down from `start`.
        case stopped(signal: Int32)
        /// The process was started; `end` is when `READY=1` arrived.
        case started
        /// The process exited on its own (a crash, seen by the runner at `start`): it is down
        /// from then, and no schedule is expected of it.
        case crashed
    }

    public var agent: Int
    public var kind: Kind
    public var start: Time
    public var end: Time

    public init(agent: Int, kind: Kind, start: Time, end: Time) {
        self.agent = agent
        self.kind = kind
        self.start = start
        self.end = end
    }

    /// Whether this may make the agent request flags outside its own schedule.
    public var triggersRefresh: Bool {
        switch kind {
        case .userChanged, .sessionStarted, .manualRefresh, .pushRegistration, .started: true
        case .appState, .stopped, .crashed: false
        }
    }

    /// Whether this starts a fresh set of impressions (IM-3: per session, per user, per process).
    public var startsImpressionEpoch: Bool {
        switch kind {
        case .userChanged, .sessionStarted, .started: true
        default: false
        }
    }
}

/// A flag switched through the admin API: its state from the change on.
public struct FlagChange: Sendable {
    public var key: String
    public var start: Time
    public var end: Time
    public var killed: Bool
    public var archived: Bool
    public var description: String

    public init(key: String, start: Time, end: Time, killed: Bool, archived: Bool, description: String = "") {
        self.key = key
        self.start = start
        self.end = end
        self.killed = killed
        self.archived = archived
        self.description = description
    }
}

/// A fault armed through `POST /admin/faults`.
public struct ArmedFault: Sendable {
    public var method: String
    public var start: Time
    public var end: Time
    public var json: JSONValue
    /// The one agent a fault scoped to its HWID hits (docs/emulator.md D.3); nil: whoever calls.
    public var agent: Int?

    public init(method: String, start: Time, end: Time, json: JSONValue, agent: Int? = nil) {
        self.method = method
        self.start = start
        self.end = end
        self.json = json
        self.agent = agent
    }

    /// A window of `forSeconds` (emulator time, which is the runner's here): from when
    /// the fault was certainly armed to when it certainly ended; nil for counted faults.
    public var window: (from: Time, to: Time)? {
        json["forSeconds"]?.numberValue.map { (end, start + $0) }
    }

    public var retryAfter: Double? { json["retryAfter"]?.numberValue }
    public var delaySeconds: Double { (json["delayMs"]?.numberValue ?? 0) / 1000 }
    public var kindName: String {
        for k in ["http", "statusCode", "body", "drop", "partial"] where json[k] != nil {
            if k == "http" { return "http \(Int(json["http"]?.numberValue ?? 0))" }
            if k == "statusCode" { return "statusCode \(Int(json["statusCode"]?.numberValue ?? 0))" }
            return k == "body" ? "garbage" : k
        }
        return "delay"
    }
}

/// A broken invariant, with what shows it.
public struct Violation: Sendable, Error, CustomStringConvertible {
    public var invariant: String
    public var agent: Int?
    /// The process the check looked at (an agent is a new process after every restart).
    public var pid: Int32?
    public var time: Time
    public var message: String
    public var evidence: [String]

    public init(_ invariant: String, agent: Int?, pid: Int32? = nil, time: Time, _ message: String, evidence: [String] = []) {
        self.invariant = invariant
        self.agent = agent
        self.pid = pid
        self.time = time
        self.message = message
        self.evidence = evidence
    }

    public var description: String {
        var text = "VIOLATION [\(invariant)]" + (agent.map { " agent \($0)" } ?? "") + (pid.map { " (pid \($0))" } ?? "")
            + " at \(iso8601(time)): \(message)"
        for line in evidence { text += "\n    " + line }
        return text
    }

    public var json: JSONValue {
        ["invariant": .string(invariant), "agent": agent.map { .number(Double($0)) } ?? .null, "pid": pid.map { .number(Double($0)) } ?? .null,
         "time": .string(iso8601(time)), "message": .string(message), "evidence": .array(evidence.map(JSONValue.string))]
    }
}

/// Describes a device call for evidence lines.
public func describe(_ c: DeviceCall) -> String {
    var s = "\(iso8601(c.time)) \(c.method) userId=\(c.userId) status=\(c.status.map(String.init) ?? "dropped")"
    if let f = c.fault { s += " fault=\(f)" }
    if let i = c.impression { s += " impression=\(i)" }
    return s
}

extension RefreshAnswer {
    /// How the soak counts a manual refresh: failed, sent, or answered from the throttle
    /// window (RF-6). Decoding already refuses a sent refresh that names a window.
    var soakCount: String { error != nil ? "refreshFailed" : sent ? "refreshSent" : "refreshThrottled" }
}
