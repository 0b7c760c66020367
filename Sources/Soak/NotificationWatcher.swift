import AgentCore
import AgentPosix
import AgentWire
import Foundation
import ToolSupport

/// What one device told its subscriber (`subscribe` `flags`, `refresh`): the counts of
/// summary.json and the report, and the expiries the expiry check looks for.
public struct HeardCounts: Sendable, Equatable {
    /// Refreshes sent, by trigger, in docs/soak.md's words (`RefreshTrigger` names them otherwise).
    public var byTrigger: [String: Int] = Dictionary(uniqueKeysWithValues: Self.triggerNames.map { ($0, 0) })
    /// Refreshes answered from the throttle window without a request (RF-6).
    public var notSentThrottled = 0
    /// Refreshes that failed, by the error's code (RF-7: HTTP status; 0 no answer; 200 unusable answer).
    public var failedByCode: [String: Int] = [:]
    /// Device times of `featureFlagsDidUpdate` `expired` (ST-3) and `discarded` (ST-2, RF-4).
    public var expiries: [Time] = []
    public var discards: [Time] = []

    public static let triggerNames = ["sessionStart", "periodic", "push", "userId", "manual", "retry", "reload"]

    public init() {}

    /// The report's name of a trigger.
    public static func name(_ trigger: RefreshTrigger) -> String {
        switch trigger {
        case .sessionStart: "sessionStart"
        case .periodic: "periodic"
        case .pushRegistration: "push"
        case .userChange: "userId"
        case .manual: "manual"
        case .retry: "retry"
        case .reload: "reload"
        }
    }

    public mutating func hear(_ n: SocketNotification) {
        switch n {
        case .refreshCompleted(let trigger, let error, let sent, _):
            if sent { byTrigger[Self.name(trigger), default: 0] += 1 }
            if let error { failedByCode["code \(error.code)", default: 0] += 1 } else if !sent { notSentThrottled += 1 }
        case .flagsDidUpdate(.expired, _, let at): expiries.append(at?.timeIntervalSince1970 ?? 0)
        case .flagsDidUpdate(.discarded, _, let at): discards.append(at?.timeIntervalSince1970 ?? 0)
        case .flagsDidUpdate, .stateChanged: break
        }
    }

    /// The sum of several devices' counts.
    public static func total(_ all: [HeardCounts]) -> HeardCounts {
        var t = HeardCounts()
        for c in all {
            t.byTrigger.merge(c.byTrigger, uniquingKeysWith: +)
            t.failedByCode.merge(c.failedByCode, uniquingKeysWith: +)
            t.notSentThrottled += c.notSentThrottled
            t.expiries += c.expiries
            t.discards += c.discards
        }
        return t
    }
}

/// The subscription's connection, handed to its thread once.
private final class Reader: @unchecked Sendable {
    let client: LineClient
    init(client: LineClient) { self.client = client }
}

/// One subscription per agent process, from its start (in the background, before anything
/// can refresh) to its exit: a thread reads the notifications into the recorder.
enum NotificationWatcher {
    /// Subscribes on a connection of its own; false when the agent did not accept it.
    static func start(agent: Int, socketPath: String, recorder: Recorder) -> Bool {
        guard let client = try? LineClient(connecting: socketPath, timeout: 10),
              let answer = try? client.call(method: .subscribe, params: SocketCall.subscribe(events: [.flags, .refresh]).params),
              case .success = answer.outcome else { return false }
        client.setTimeout(nil)
        let reader = Reader(client: client)
        let thread = Thread {
            while true {
                // Until the process exits (end of stream): the runner stops every agent at the end.
                let line: [UInt8]?
                do { line = try reader.client.next() } catch { return }
                guard let line else { return }
                guard case .notification(let method, let params)? = try? RPCServerMessage.parse(line),
                      let n = try? SocketNotification(method: method, params: params) else { continue }
                let arrived = now()
                recorder.state.withLock { s in
                    s.tracks[agent].heard.hear(n)
                    if case .flagsDidUpdate(.expired, _, _) = n { s.tracks[agent].expiredArrivals.append(arrived) }
                }
            }
        }
        thread.stackSize = 1 << 19
        thread.start()
        return true
    }
}
