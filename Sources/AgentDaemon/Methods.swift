import AgentCore
import AgentWire
import FoundationEssentials

/// The socket methods of PROTOCOL B.1, B.2 and H, mapped onto the core. Parameters come
/// decoded (`SocketCall.decode`); the connection's methods (`subscribe`, `unsubscribe`,
/// `metrics`) are the server's.
enum Methods {
    static func call(_ call: SocketCall, on host: AgentHost, _ done: @escaping (RPCOutcome) -> Void) {
        do throws(RPCError) {
            switch call {
            case .get(let key):
                let e = host.agent.get(key)
                done(.success(FlagAnswers.get(e.value, e.provenance)))
            case .isEnabled(let key, let fallback):
                let e = host.agent.isEnabled(key, default: fallback)
                done(.success(FlagAnswers.isEnabled(e.value, e.provenance)))
            case .property(let key, let name, let type, let fallback):
                let e = host.agent.property(key, name, type: type, default: fallback)
                done(.success(FlagAnswers.property(e.value, e.provenance)))
            case .refresh:
                // A refresh answered at once never went to the server: the throttle window
                // (RF-6) or no flags URL (RF-8). `sent` says which kind it was (PROTOCOL H).
                var returned = false
                host.agent.refresh { [weak host] error in
                    let sent = returned
                    if !sent { host?.onUnsentRefresh?(error) }
                    done(.success(["error": RefreshError.json(error), "sent": .bool(sent)]))
                }
                returned = true
            case .logImpression(let key):
                done(.success(["logged": .bool(host.agent.logImpression(key))]))
            case .setUserId(let userId):
                host.agent.setUserId(userId)
                done(.success([:]))
            case .setAppState(let state):
                done(.success(["sessionStarted": .bool(host.agent.setAppState(state))]))
            case .registerForPushNotifications:
                let r = host.agent.registerForPushNotifications()
                done(.success(["granted": .bool(r.granted), "pushToken": r.pushToken.map(JSONValue.string) ?? .null]))
            case .unregisterForPushNotifications:
                host.agent.unregisterForPushNotifications()
                done(.success([:]))
            case .setNotificationAuthorization(let status):
                host.agent.setNotificationAuthorization(status)
                done(.success([:]))
            case .presentPushPrimer(let configuration):
                done(.success(host.agent.presentPushPrimer(configuration).json))
            case .status:
                done(.success(StatusReport.json(host.agent.status())))
            case .clock:
                guard let controller = host.clockController else { throw .clockNotControlled(method: call.method.rawValue) }
                done(.success(controller.clockResult()))
            case .advanceClock(let target):
                guard let controller = host.clockController else { throw .clockNotControlled(method: call.method.rawValue) }
                try controller.advance(target, done)
            case .subscribe, .unsubscribe, .metrics:
                throw .methodNotFound(call.method.rawValue)
            }
        } catch {
            done(.failure(error))
        }
    }
}
