import AgentCore
import FoundationEssentials

/// The notifications a subscriber hears (B.1 `featureFlagsDidUpdate`, docs/device-clock.md H
/// `refreshCompleted` and `stateChanged`) as values, both ways: the daemon sends them with
/// `method` and `params`, agentctl's `watch` reads them back with `init(method:params:)`.
public enum SocketNotification: Sendable, Equatable {
    /// Served flags changed: which keys, why (LS-1, LS-2, LS-3), and when in device time
    /// (nil from an agent that did not say).
    case flagsDidUpdate(reason: FlagChangeReason, changed: [String], at: Date?)
    /// After every refresh, changed or not; `sent` is false when it was answered without a
    /// request (RF-6 throttle, RF-8).
    case refreshCompleted(trigger: RefreshTrigger, error: RefreshError?, sent: Bool, at: Date)
    /// `status.state` changed.
    case stateChanged(state: AgentStatus.State, previous: AgentStatus.State?, at: Date)

    /// The `subscribe` event that hears it.
    public var event: SubscriptionEvent {
        switch self {
        case .flagsDidUpdate: .flags
        case .refreshCompleted: .refresh
        case .stateChanged: .state
        }
    }

    public var method: String {
        switch self {
        case .flagsDidUpdate: SocketMethod.flagsDidUpdate
        case .refreshCompleted: SocketMethod.refreshCompleted
        case .stateChanged: SocketMethod.stateChanged
        }
    }

    public var params: JSONValue {
        switch self {
        case .flagsDidUpdate(let reason, let changed, let at):
            ["reason": .string(reason.rawValue), "changed": .array(changed.map(JSONValue.string)), "at": SocketTime.json(at)]
        case .refreshCompleted(let trigger, let error, let sent, let at):
            ["trigger": .string(trigger.rawValue), "error": RefreshError.json(error), "sent": .bool(sent), "at": SocketTime.json(at)]
        case .stateChanged(let state, let previous, let at):
            ["state": .string(state.rawValue), "previous": previous.map { .string($0.rawValue) } ?? .null, "at": SocketTime.json(at)]
        }
    }

    /// Reads a notification; an unknown `method` or params of another shape name what is wrong.
    public init(method: String, params: JSONValue) throws(AnswerError) {
        let r = AnswerReader(params, path: "params.")
        switch method {
        case SocketMethod.flagsDidUpdate:
            var changed: [String] = []
            for (i, key) in try r.array("changed").enumerated() {
                guard let key = key.stringValue else { throw AnswerError("params.changed[\(i)]", "expected a string") }
                changed.append(key)
            }
            self = .flagsDidUpdate(reason: try r.enumeration("reason"), changed: changed, at: try r.optionalTime("at"))
        case SocketMethod.refreshCompleted:
            self = .refreshCompleted(trigger: try r.enumeration("trigger"),
                                     error: try r.optionalObject("error").map { (e) throws(AnswerError) in try RefreshError(json: e, path: "params.error.") },
                                     sent: try r.bool("sent"), at: try r.time("at"))
        case SocketMethod.stateChanged:
            self = .stateChanged(state: try r.enumeration("state"), previous: try r.optionalEnumeration("previous"), at: try r.time("at"))
        default:
            throw AnswerError("method", "not a notification of the socket API: \(method)")
        }
    }
}

extension SocketNotification {
    /// The device time the notification names (nil: a `featureFlagsDidUpdate` without one).
    public var at: Date? {
        switch self {
        case .flagsDidUpdate(_, _, let at): at
        case .refreshCompleted(_, _, _, let at), .stateChanged(_, _, let at): at
        }
    }
}
