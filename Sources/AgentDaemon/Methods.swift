import AgentCore
import AgentWire
import FoundationEssentials

/// The socket methods of PROTOCOL B.1 and B.2, mapped onto the core.
enum Methods {
    static let known: Set<String> = [
        "get", "isEnabled", "property", "refresh", "logImpression", "subscribe", "unsubscribe",
        "setUserId", "setAppState", "registerForPushNotifications", "unregisterForPushNotifications",
        "setNotificationAuthorization", "presentPushPrimer", "status", "metrics",
    ]

    static func call(_ request: RPCRequest, on host: AgentHost, _ done: @escaping (RPCOutcome) -> Void) {
        let p = request.params
        do throws(RPCError) {
            switch request.method {
            case "get":
                let key = try p.string("key")
                try p.rejectUnknown(["key"])
                let e = host.agent.get(key)
                var result = provenance(e.provenance)
                result["flag"] = e.value.map(flagJSON) ?? .null
                done(.success(.object(result)))
            case "isEnabled":
                let key = try p.string("key")
                let fallback = try p.bool("default")
                try p.rejectUnknown(["key", "default"])
                let e = host.agent.isEnabled(key, default: fallback)
                var result = provenance(e.provenance)
                result["enabled"] = .bool(e.value)
                done(.success(.object(result)))
            case "property":
                let key = try p.string("key")
                let name = try p.string("property")
                let type = try p.enumeration("type", as: PropertyType.self)
                try p.rejectUnknown(["key", "property", "type", "default"])
                var fallback: JSONValue = .null
                if type.isScalar {
                    fallback = try p.value("default")
                    guard type.matches(fallback) else {
                        throw .invalidParams("parameter 'default' must be a \(type.rawValue) for type \(type.rawValue)", parameter: "default")
                    }
                }
                let e = host.agent.property(key, name, type: type, default: fallback)
                var result = provenance(e.provenance)
                result["value"] = e.value
                done(.success(.object(result)))
            case "refresh":
                try p.rejectUnknown([])
                host.agent.refresh { error in done(.success(["error": StatusReport.errorJSON(error)])) }
            case "logImpression":
                let key = try p.string("key")
                try p.rejectUnknown(["key"])
                done(.success(["logged": .bool(host.agent.logImpression(key))]))
            case "setUserId":
                let userId = try p.nonEmptyString("userId")
                try p.rejectUnknown(["userId"])
                host.agent.setUserId(userId)
                done(.success([:]))
            case "setAppState":
                let state = try p.enumeration("state", as: AppState.self)
                try p.rejectUnknown(["state"])
                done(.success(["sessionStarted": .bool(host.agent.setAppState(state))]))
            case "registerForPushNotifications":
                try p.rejectUnknown([])
                let r = host.agent.registerForPushNotifications()
                done(.success(["granted": .bool(r.granted), "pushToken": r.pushToken.map(JSONValue.string) ?? .null]))
            case "unregisterForPushNotifications":
                try p.rejectUnknown([])
                host.agent.unregisterForPushNotifications()
                done(.success([:]))
            case "setNotificationAuthorization":
                let status = try p.enumeration("status", as: NotificationAuthorization.self)
                try p.rejectUnknown(["status"])
                host.agent.setNotificationAuthorization(status)
                done(.success([:]))
            case "presentPushPrimer":
                let configuration: PrimerConfiguration
                do {
                    configuration = try PrimerConfiguration(params: p.values)
                } catch {
                    throw .invalidParams(error.message, parameter: error.parameter)
                }
                done(.success(host.agent.presentPushPrimer(configuration).json))
            case "status":
                try p.rejectUnknown([])
                done(.success(StatusReport.json(host.agent.status())))
            default:
                throw .methodNotFound(request.method)
            }
        } catch {
            done(.failure(error))
        }
    }

    static func flagJSON(_ flag: FeatureFlag) -> JSONValue {
        ["key": .string(flag.key), "isEnabled": .bool(flag.isEnabled), "ruleId": .string(flag.ruleId),
         "properties": .object(flag.properties)]
    }

    /// B.1 provenance: reason, errorCode (only with ERROR), source, ageSeconds.
    static func provenance(_ p: Provenance) -> [String: JSONValue] {
        var o: [String: JSONValue] = [
            "reason": .string(p.reason.rawValue), "source": .string(p.source.rawValue),
            "ageSeconds": p.ageSeconds.map { .number(($0 * 1000).rounded() / 1000) } ?? .null,
        ]
        if let code = p.errorCode { o["errorCode"] = .string(code.rawValue) }
        return o
    }
}
