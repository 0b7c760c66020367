import AgentCore
import AgentWire
import FoundationEssentials

/// The socket methods of PROTOCOL B.1 and B.2, mapped onto the core.
enum Methods {
    /// Calls `method` (parsed by the caller from `request.method`) on the agent. The
    /// connection's methods (`subscribe`, `unsubscribe`, `metrics`) are the server's.
    static func call(_ method: SocketMethod, _ request: RPCRequest, on host: AgentHost, _ done: @escaping (RPCOutcome) -> Void) {
        let p = request.params
        do throws(RPCError) {
            switch method {
            case .get:
                let key = try p.string("key")
                try p.rejectUnknown(for: method)
                let e = host.agent.get(key)
                done(.success(FlagAnswers.get(e.value, e.provenance)))
            case .isEnabled:
                let key = try p.string("key")
                let fallback = try p.bool("default")
                try p.rejectUnknown(for: method)
                let e = host.agent.isEnabled(key, default: fallback)
                done(.success(FlagAnswers.isEnabled(e.value, e.provenance)))
            case .property:
                let key = try p.string("key")
                let name = try p.string("property")
                let type = try p.enumeration("type", as: PropertyType.self)
                try p.rejectUnknown(for: method)
                var fallback: JSONValue = .null
                if type.isScalar {
                    fallback = try p.value("default")
                    guard type.matches(fallback) else {
                        throw .invalidParams("parameter 'default' must be a \(type.rawValue) for type \(type.rawValue)", parameter: "default")
                    }
                }
                let e = host.agent.property(key, name, type: type, default: fallback)
                done(.success(FlagAnswers.property(e.value, e.provenance)))
            case .refresh:
                try p.rejectUnknown(for: method)
                // A refresh answered at once never went to the server: the throttle window
                // (RF-6) or no flags URL (RF-8). `sent` says which kind it was (PROTOCOL H).
                var returned = false
                host.agent.refresh { [weak host] error in
                    let sent = returned
                    if !sent { host?.onUnsentRefresh?(error) }
                    done(.success(["error": StatusReport.errorJSON(error), "sent": .bool(sent)]))
                }
                returned = true
            case .logImpression:
                let key = try p.string("key")
                try p.rejectUnknown(for: method)
                done(.success(["logged": .bool(host.agent.logImpression(key))]))
            case .setUserId:
                let userId = try p.nonEmptyString("userId")
                try p.rejectUnknown(for: method)
                host.agent.setUserId(userId)
                done(.success([:]))
            case .setAppState:
                let state = try p.enumeration("state", as: AppState.self)
                try p.rejectUnknown(for: method)
                done(.success(["sessionStarted": .bool(host.agent.setAppState(state))]))
            case .registerForPushNotifications:
                try p.rejectUnknown(for: method)
                let r = host.agent.registerForPushNotifications()
                done(.success(["granted": .bool(r.granted), "pushToken": r.pushToken.map(JSONValue.string) ?? .null]))
            case .unregisterForPushNotifications:
                try p.rejectUnknown(for: method)
                host.agent.unregisterForPushNotifications()
                done(.success([:]))
            case .setNotificationAuthorization:
                let status = try p.enumeration("status", as: NotificationAuthorization.self)
                try p.rejectUnknown(for: method)
                host.agent.setNotificationAuthorization(status)
                done(.success([:]))
            case .presentPushPrimer:
                let configuration: PrimerConfiguration
                do {
                    configuration = try PrimerConfiguration(params: p.values)
                } catch {
                    throw .invalidParams(error.message, parameter: error.parameter)
                }
                done(.success(host.agent.presentPushPrimer(configuration).json))
            case .status:
                try p.rejectUnknown(for: method)
                done(.success(StatusReport.json(host.agent.status())))
            case .clock:
                try p.rejectUnknown(for: method)
                guard let controller = host.clockController else { throw .clockNotControlled(method: method.rawValue) }
                done(.success(controller.clockResult()))
            case .advanceClock:
                guard let controller = host.clockController else { throw .clockNotControlled(method: method.rawValue) }
                try controller.advance(p, done)
            case .subscribe, .unsubscribe, .metrics:
                throw .methodNotFound(request.method)
            }
        } catch {
            done(.failure(error))
        }
    }
}
