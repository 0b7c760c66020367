import AgentCore
import FoundationEssentials

/// A socket request decoded: the method with its parameters as values (docs/socket-api.md B.1, B.2,
/// H). `decode` is the one place the socket's parameters are read and checked; the server
/// routes on the case, and nothing after it reads a raw parameter. Every error is `-32602`
/// naming the parameter (`data.parameter`), with nothing changed.
public enum SocketCall: Sendable, Equatable {
    // B.1 Flags
    case get(key: String)
    case isEnabled(key: String, default: Bool)
    /// `default` is `null` for `jsonObject`/`jsonArray` reads, else a value of `type`.
    case property(key: String, property: String, type: PropertyType, default: JSONValue)
    case refresh
    case logImpression(key: String)
    case subscribe(events: Set<SubscriptionEvent>)
    case unsubscribe
    // B.2 The headless device
    case setUserId(String)
    case setAppState(AppState)
    case registerForPushNotifications
    case unregisterForPushNotifications
    case setNotificationAuthorization(NotificationAuthorization)
    case presentPushPrimer(PrimerConfiguration)
    case status
    /// F.2's Prometheus text, for `pushwoosh-agentctl metrics`.
    case metrics
    // H The device clock
    case clock
    case advanceClock(ClockAdvance)

    /// `advanceClock`'s target: by `seconds` (> 0), or `to` a device time (checked against
    /// the device's clock by the clock's owner: it must not be in the past); and `allowRemote`,
    /// the switch an advance of more than a day needs when the server is not on this host
    /// (docs/device-clock.md H).
    public struct ClockAdvance: Sendable, Equatable {
        public enum Target: Sendable, Equatable {
            case seconds(Double)
            case to(Date)
        }

        public var target: Target
        public var allowRemote: Bool

        public init(_ target: Target, allowRemote: Bool = false) {
            self.target = target
            self.allowRemote = allowRemote
        }

        public static func seconds(_ seconds: Double, allowRemote: Bool = false) -> ClockAdvance {
            ClockAdvance(.seconds(seconds), allowRemote: allowRemote)
        }

        public static func to(_ date: Date, allowRemote: Bool = false) -> ClockAdvance {
            ClockAdvance(.to(date), allowRemote: allowRemote)
        }
    }

    public var method: SocketMethod {
        switch self {
        case .get: .get
        case .isEnabled: .isEnabled
        case .property: .property
        case .refresh: .refresh
        case .logImpression: .logImpression
        case .subscribe: .subscribe
        case .unsubscribe: .unsubscribe
        case .setUserId: .setUserId
        case .setAppState: .setAppState
        case .registerForPushNotifications: .registerForPushNotifications
        case .unregisterForPushNotifications: .unregisterForPushNotifications
        case .setNotificationAuthorization: .setNotificationAuthorization
        case .presentPushPrimer: .presentPushPrimer
        case .status: .status
        case .metrics: .metrics
        case .clock: .clock
        case .advanceClock: .advanceClock
        }
    }

    /// Reads `method`'s parameters. The required ones are checked first, in the order of
    /// docs/socket-api.md B, then unknown names are refused (`SocketMethod.parameters`). A
    /// missing parameter's error names the unknown ones given too (`{"kye": "a"}`: "missing
    /// required parameter 'key' (unknown parameter 'kye' given)"), so that a misspelling is seen.
    public static func decode(_ method: SocketMethod, _ p: RPCParams) throws(RPCError) -> SocketCall {
        do throws(RPCError) {
            return try decodeInOrder(method, p)
        } catch {
            let unknown = p.values.keys.filter { !method.parameters.contains($0) }.sorted()
            guard error.message.hasPrefix("missing required parameter"), !unknown.isEmpty else { throw error }
            var named = error
            named.message += " (unknown parameter\(unknown.count == 1 ? "" : "s") \(unknown.map { "'\($0)'" }.joined(separator: ", ")) given)"
            throw named
        }
    }

    private static func decodeInOrder(_ method: SocketMethod, _ p: RPCParams) throws(RPCError) -> SocketCall {
        let call: SocketCall
        switch method {
        case .get: call = .get(key: try p.string("key"))
        case .isEnabled: call = .isEnabled(key: try p.string("key"), default: try p.bool("default"))
        case .property:
            let key = try p.string("key")
            let name = try p.string("property")
            let spelled = try p.string("type")
            guard let type = PropertyType(spelling: spelled) else {
                throw .invalidParams("parameter 'type' must be one of: \(PropertyType.spellings)", parameter: "type")
            }
            try p.rejectUnknown(for: method)
            var fallback: JSONValue = .null
            if type.isScalar {
                fallback = try p.value("default")
                guard type.matches(fallback) else {
                    throw .invalidParams("parameter 'default' must be a \(type.rawValue) for type \(type.rawValue)", parameter: "default")
                }
            }
            return .property(key: key, property: name, type: type, default: fallback)
        case .refresh: call = .refresh
        case .logImpression: call = .logImpression(key: try p.string("key"))
        case .subscribe:
            try p.rejectUnknown(for: method)
            return .subscribe(events: try subscriptionEvents(p))
        case .unsubscribe: call = .unsubscribe
        case .setUserId: call = .setUserId(try p.nonEmptyString("userId"))
        case .setAppState: call = .setAppState(try p.enumeration("state", as: AppState.self))
        case .registerForPushNotifications: call = .registerForPushNotifications
        case .unregisterForPushNotifications: call = .unregisterForPushNotifications
        case .setNotificationAuthorization:
            call = .setNotificationAuthorization(try p.enumeration("status", as: NotificationAuthorization.self))
        case .presentPushPrimer:
            do {
                return .presentPushPrimer(try PrimerConfiguration(params: p.values))  // its own order: unknown names first
            } catch {
                throw .invalidParams(error.message, parameter: error.parameter)
            }
        case .status: call = .status
        case .metrics: call = .metrics
        case .clock: call = .clock
        case .advanceClock:
            try p.rejectUnknown(for: method)
            return .advanceClock(try clockAdvance(p))
        }
        try p.rejectUnknown(for: method)
        return call
    }

    /// `subscribe`'s `events` (docs/device-clock.md H): default `["flags"]`; unknown names are -32602.
    static func subscriptionEvents(_ params: RPCParams) throws(RPCError) -> Set<SubscriptionEvent> {
        guard let value = params["events"], !value.isNull else { return [.flags] }
        let names = SubscriptionEvent.allCases.map(\.rawValue).joined(separator: ", ")
        guard let array = value.arrayValue, !array.isEmpty else {
            throw .invalidParams("parameter 'events' must be a non-empty array of \(names)", parameter: "events")
        }
        var events: Set<SubscriptionEvent> = []
        for item in array {
            guard let event = item.stringValue.flatMap(SubscriptionEvent.init(rawValue:)) else {
                throw .invalidParams("parameter 'events': unknown event \(JSONWriter.string(item)) (expected \(names))", parameter: "events")
            }
            events.insert(event)
        }
        return events
    }

    /// `advanceClock` with `seconds` (> 0) or `to` (ISO 8601), not both, and the optional
    /// boolean `allowRemote`.
    static func clockAdvance(_ params: RPCParams) throws(RPCError) -> ClockAdvance {
        var allowRemote = false
        if let value = params.optionalValue("allowRemote") {
            guard case .bool(let b) = value else {
                throw .invalidParams("parameter 'allowRemote' must be a boolean, found \(JSONWriter.string(value))", parameter: "allowRemote")
            }
            allowRemote = b
        }
        return ClockAdvance(try clockTarget(params), allowRemote: allowRemote)
    }

    /// `seconds` (> 0) or `to` (ISO 8601), not both.
    static func clockTarget(_ params: RPCParams) throws(RPCError) -> ClockAdvance.Target {
        // `null` counts as absent, as everywhere in the socket API. (Written before as
        // `params["to"].flatMap { $0.isNull ? nil : $0 }`, where `nil` became JSONValue's own
        // nil literal, `.null`, so `{"seconds": null, "to": …}` was refused as "both".)
        switch (params.optionalValue("seconds"), params.optionalValue("to")) {
        case (nil, nil):
            throw .invalidParams("advanceClock needs 'seconds' (> 0) or 'to' (an ISO 8601 time)", parameter: "seconds")
        case (_?, _?):
            throw .invalidParams("give 'seconds' or 'to', not both", parameter: "to")
        case (let value?, nil):
            guard let n = value.numberValue, n.isFinite else {
                throw .invalidParams("parameter 'seconds' must be a number, found \(JSONWriter.string(value))", parameter: "seconds")
            }
            guard n > 0 else {
                throw .invalidParams("parameter 'seconds' must be > 0 (the device clock only moves forward), found \(JSONWriter.string(value))",
                                     parameter: "seconds")
            }
            return .seconds(n)
        case (nil, let value?):
            guard let text = value.stringValue, let date = try? Date(text, strategy: .iso8601) else {
                throw .invalidParams("parameter 'to' must be an ISO 8601 time such as 2026-12-03T10:00:00Z, found \(JSONWriter.string(value))",
                                     parameter: "to")
            }
            return .to(date)
        }
    }
}
