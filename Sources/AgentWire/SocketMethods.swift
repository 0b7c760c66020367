import AgentCore

/// The socket methods (docs/socket-api.md B.1, B.2), defined once: the name on the wire, who may
/// call it (B.3) and the parameters it accepts. The server dispatches on it, rejects
/// unknown parameters with it and checks permissions with it; `pushwoosh-agentctl`, the
/// soak runner and the benchmarks name methods with it instead of strings.
public enum SocketMethod: String, Sendable, CaseIterable {
    // B.1 Flags
    case get, isEnabled, property, refresh, logImpression, subscribe, unsubscribe
    // B.2 The headless device
    case setUserId, setAppState, registerForPushNotifications, unregisterForPushNotifications
    case setNotificationAuthorization, presentPushPrimer, status
    /// The Prometheus text of the HTTP interface's /metrics (docs/http.md F.2), for agentctl.
    case metrics
    // H The device clock
    case clock, advanceClock

    /// B.3: who may call a method.
    public enum Access: Sendable, Equatable {
        /// Anyone who can connect.
        case read
        /// Root, the agent's own user, or a member of `ControlGroup`.
        case control
    }

    public var access: Access {
        switch self {
        case .get, .isEnabled, .property, .status, .subscribe, .unsubscribe, .metrics: .read
        case .refresh, .logImpression, .setUserId, .setAppState, .registerForPushNotifications,
             .unregisterForPushNotifications, .setNotificationAuthorization, .presentPushPrimer, .clock, .advanceClock: .control
        }
    }

    /// The parameters the method accepts; any other is `-32602` (invalid params).
    public var parameters: Set<String> {
        switch self {
        case .get, .logImpression: ["key"]
        case .isEnabled: ["key", "default"]
        case .property: ["key", "property", "type", "default"]
        case .setUserId: ["userId"]
        case .setAppState: ["state"]
        case .setNotificationAuthorization: ["status"]
        case .presentPushPrimer: PrimerConfiguration.parameterNames
        case .subscribe: ["events"]
        case .advanceClock: ["seconds", "to", "allowRemote"]
        case .refresh, .unsubscribe, .registerForPushNotifications,
             .unregisterForPushNotifications, .status, .metrics, .clock: []
        }
    }

    /// The notification a subscriber receives (B.1 `subscribe`).
    public static let flagsDidUpdate = "featureFlagsDidUpdate"
    /// docs/device-clock.md H: after every refresh, changed or not (`subscribe` with `"refresh"`).
    public static let refreshCompleted = "refreshCompleted"
    /// docs/device-clock.md H: `status.state` changed (`subscribe` with `"state"`).
    public static let stateChanged = "stateChanged"
}

/// What a subscriber asks to hear (docs/device-clock.md H `subscribe` `events`; default `["flags"]`).
public enum SubscriptionEvent: String, Sendable, CaseIterable {
    /// `featureFlagsDidUpdate` (B.1).
    case flags
    /// `refreshCompleted`.
    case refresh
    /// `stateChanged`.
    case state
}

extension RPCParams {
    /// Rejects any parameter `method` does not accept.
    public func rejectUnknown(for method: SocketMethod) throws(RPCError) {
        try rejectUnknown(method.parameters)
    }
}

/// The results of `get` and `isEnabled` (B.1) as the general path builds them. The fast
/// path writes the same bytes without a tree (`RPCFastPath.writeGet`, `writeIsEnabled`);
/// `FastPathParityTests` proves it.
public enum FlagAnswers {
    /// `isEnabled`: `{"enabled": bool}` plus the provenance fields.
    public static func isEnabled(_ enabled: Bool, _ provenance: Provenance) -> JSONValue {
        var result = fields(provenance)
        result["enabled"] = .bool(enabled)
        return .object(result)
    }

    /// `get`: `{"flag": null | {key, isEnabled, ruleId, properties}}` plus the provenance fields.
    public static func get(_ flag: FeatureFlag?, _ provenance: Provenance) -> JSONValue {
        var result = fields(provenance)
        result["flag"] = flag.map(self.flag) ?? .null
        return .object(result)
    }

    /// `property`: `{"value": …}` plus the provenance fields.
    public static func property(_ value: JSONValue, _ provenance: Provenance) -> JSONValue {
        var result = fields(provenance)
        result["value"] = value
        return .object(result)
    }

    public static func flag(_ flag: FeatureFlag) -> JSONValue {
        ["key": .string(flag.key), "isEnabled": .bool(flag.isEnabled), "ruleId": .string(flag.ruleId),
         "properties": .object(flag.properties)]
    }

    /// B.1 provenance: reason, errorCode and errorMessage (only with ERROR), source, ageSeconds
    /// (rounded to milliseconds).
    public static func fields(_ p: Provenance) -> [String: JSONValue] {
        var o: [String: JSONValue] = [
            "reason": .string(p.reason.rawValue), "source": .string(p.source.rawValue),
            "ageSeconds": p.ageSeconds.map { .number(SocketTime.seconds($0)) } ?? .null,
        ]
        if let code = p.errorCode { o["errorCode"] = .string(code.rawValue) }
        if let message = p.errorMessage { o["errorMessage"] = .string(message) }
        return o
    }
}

extension RPCEncoder {
    /// A request line (with its `\n`) for one of the socket methods.
    public static func request(id: RPCID?, method: SocketMethod, params: [String: JSONValue] = [:]) -> [UInt8] {
        request(id: id, method: method.rawValue, params: params)
    }
}
