import AgentCore
import Synchronization

/// Where the coverage plan's duties meet across threads: the device times at which a driver
/// must look (the clock stops there until it has), and the planned faults the chaos thread
/// armed for a device that its driver has not yet sent a request into.
public final class DutyBoard: Sendable {
    private struct State {
        var holds: [(agent: Int, at: Time)] = []
        var armed: [Int: [CoveragePlan.Duty]] = [:]
        var silent: Set<Int> = []
    }

    private let state = Mutex(State())

    public init() {}

    /// The clock stops at `at` (device time) until `agent`'s driver releases it.
    public func hold(agent: Int, at: Time) {
        state.withLock { $0.holds.append((agent, at)) }
    }

    /// `agent`'s earliest hold at or before `deviceNow`.
    public func due(agent: Int, deviceNow: Time) -> Time? {
        state.withLock { s in s.holds.filter { $0.agent == agent && $0.at <= deviceNow }.map(\.at).min() }
    }

    public func release(agent: Int, at: Time) {
        state.withLock { s in s.holds.removeAll { $0.agent == agent && $0.at == at } }
    }

    /// Releases every hold of `agent` (its duty is over, or it gave up).
    public func releaseAll(agent: Int) {
        state.withLock { s in s.holds.removeAll { $0.agent == agent } }
    }

    /// The earliest and the latest hold of any agent.
    public var earliest: (agent: Int, at: Time)? { state.withLock { $0.holds.min { $0.at < $1.at } } }
    public var latest: Time? { state.withLock { $0.holds.map(\.at).max() } }

    public func armed(agent: Int, _ duty: CoveragePlan.Duty) {
        state.withLock { $0.armed[agent, default: []].append(duty) }
    }

    /// The planned faults armed for `agent` since the last call.
    public func takeArmed(agent: Int) -> [CoveragePlan.Duty] {
        state.withLock { s in defer { s.armed[agent] = nil }; return s.armed[agent] ?? [] }
    }

    /// `agent`'s duty keeps it from sending any flags request (the expiry's day in the
    /// background): a fault aimed at it would hit nothing.
    public func silent(agent: Int, _ isSilent: Bool) {
        state.withLock { s in if isSilent { s.silent.insert(agent) } else { s.silent.remove(agent) } }
    }

    public var silentAgents: Set<Int> { state.withLock { $0.silent } }
}
