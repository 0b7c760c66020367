import AgentCore
import FoundationEssentials

// The other direction of `SocketCall.decode`: a call as the params a client sends, so
// pushwoosh-agentctl, the soak and the fault tool spell no parameter name of their own.
// `decode(call.method, call.params) == call` for every call (SocketCallTests).

extension SocketCall {
    /// The params object of this call, in the socket API's names (docs/socket-api.md B.1, B.2, H).
    public var params: [String: JSONValue] {
        switch self {
        case .get(let key), .logImpression(let key): ["key": .string(key)]
        case .isEnabled(let key, let fallback): ["key": .string(key), "default": .bool(fallback)]
        case .property(let key, let property, let type, let fallback):
            ["key": .string(key), "property": .string(property), "type": .string(type.rawValue)]
                .merging(fallback.isNull ? [:] : ["default": fallback]) { a, _ in a }
        case .subscribe(let events):
            // The default (flags only) travels as no params, as the agent reads it.
            events == [.flags] ? [:] : ["events": .array(SubscriptionEvent.allCases.filter(events.contains).map { .string($0.rawValue) })]
        case .setUserId(let userId): ["userId": .string(userId)]
        case .setAppState(let state): ["state": .string(state.rawValue)]
        case .setNotificationAuthorization(let status): ["status": .string(status.rawValue)]
        case .presentPushPrimer(let configuration): configuration.params
        case .advanceClock(let advance): advance.params
        case .refresh, .unsubscribe, .registerForPushNotifications, .unregisterForPushNotifications,
             .status, .metrics, .clock:
            [:]
        }
    }

    /// `advanceClock`'s params for a time as given, unchecked (the agent checks it).
    public static func advanceClockParams(to text: String) -> [String: JSONValue] { ["to": .string(text)] }

    /// `advanceClock` to `text` (ISO 8601), read as the agent reads it; nil when
    /// the agent would refuse it.
    public static func advanceClock(to text: String) -> SocketCall? {
        (try? Date(text, strategy: .iso8601)).map { .advanceClock(.to($0)) }
    }
}

extension RPCEncoder {
    /// A request line (with its `\n`) for a typed call.
    public static func request(id: RPCID?, _ call: SocketCall) -> [UInt8] {
        request(id: id, method: call.method, params: call.params)
    }
}

extension SocketCall.ClockAdvance {
    /// `advanceClock`'s params: `seconds` or `to`, and `allowRemote` when set.
    var params: [String: JSONValue] {
        var params: [String: JSONValue]
        switch target {
        case .seconds(let seconds): params = ["seconds": .number(seconds)]
        case .to(let date): params = SocketCall.advanceClockParams(to: date.timeIntervalSince1970.rounded() == date.timeIntervalSince1970
                                                                       ? SocketTime.string(date) : SocketTime.jsonMilliseconds(date).stringValue!)
        }
        if allowRemote { params["allowRemote"] = true }
        return params
    }
}
