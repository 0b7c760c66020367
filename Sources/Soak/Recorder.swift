import AgentCore
import Foundation
import Synchronization

/// The tracked flag's state as one `get` saw it (for the timeline).
public enum TrackedState: String, Sendable {
    case on, off, killed, absent, none
}

/// Per-agent data for the timeline and the summary.
public struct AgentTrack: Sendable {
    public var hwid = ""
    /// Every process that ran as this agent, in order (the last one is current).
    public var pids: [Int32] = []
    /// Its socket (as the lab placed it).
    public var socket = ""
    /// What the timeline draws for this agent, recorded as it happens (the report adds the
    /// title and the getFeatureFlags calls, which it reads from the emulator's log).
    public var lane = TimelineLane(title: "")
    public var users: [(Time, String)] = []
    public var observations = 0
    public var maxAge: Double = 0
    public var actions: [String: Int] = [:]
    /// What its subscriptions heard (refreshes by trigger, expiries, discards).
    public var heard = HeardCounts()
    /// When each `featureFlagsDidUpdate` `expired` arrived (real time; the expiry check's exact clock).
    public var expiredArrivals: [Time] = []

    public init() {}
}

/// Everything the drivers, the chaos thread and the checker share.
public final class Recorder: Sendable {
    public struct State: Sendable {
        public var actions: [[AgentAction]]
        public var tracks: [AgentTrack]
        public var pendingFlags: [FlagObservation] = []
        public var pendingStatus: [StatusObservation] = []
        public var changes: [FlagChange] = []
        public var faults: [ArmedFault] = []
        public var violations: [Violation] = []
        public var restartsBySignal: [Int32: Int] = [:]
        public var flagChangeCounts: [String: Int] = [:]
        public var faultCounts: [String: Int] = [:]
        public var primerAvailable: Bool?
        /// The coverage plan's looks, waiting for the request log to catch up (CoveragePlan).
        public var expiryProbes: [ExpiryProbe] = []
        public var cacheProbes: [CacheProbe] = []
        public var refreshProbes: [RefreshProbe] = []
        /// What the plan's duties did not get to, in words (summary.json `planNotes`).
        public var planNotes: [String] = []
        public var stop = false
        /// Per agent: when the runner's current call (or restart) began; its effects may show
        /// in the request log before the runner records the action, so checks wait.
        public var busySince: [Time?]
    }

    public let state: Mutex<State>

    public init(agents: Int) {
        state = Mutex(State(actions: Array(repeating: [], count: agents), tracks: Array(repeating: AgentTrack(), count: agents),
                            busySince: Array(repeating: nil, count: agents)))
    }

    public var stopping: Bool { state.withLock { $0.stop } }
    public func requestStop() { state.withLock { $0.stop = true } }

    public func action(_ a: AgentAction) {
        state.withLock { s in
            s.actions[a.agent].append(a)
            switch a.kind {
            case .stopped(let sig):
                if sig != 0 {
                    s.tracks[a.agent].lane.restarts.append((a.start, sig))
                    s.restartsBySignal[sig, default: 0] += 1
                }
                if let last = s.tracks[a.agent].lane.background.last, last.1 == nil {
                    s.tracks[a.agent].lane.background[s.tracks[a.agent].lane.background.count - 1].1 = a.start
                }
            case .started: s.tracks[a.agent].lane.readies.append(a.end)
            case .crashed:
                if let last = s.tracks[a.agent].lane.background.last, last.1 == nil {
                    s.tracks[a.agent].lane.background[s.tracks[a.agent].lane.background.count - 1].1 = a.start
                }
            case .appState(let active):
                if active {
                    if let last = s.tracks[a.agent].lane.background.last, last.1 == nil {
                        s.tracks[a.agent].lane.background[s.tracks[a.agent].lane.background.count - 1].1 = a.end
                    }
                } else {
                    s.tracks[a.agent].lane.background.append((a.start, nil))
                }
            case .userChanged(let u): s.tracks[a.agent].users.append((a.end, u))
            default: break
            }
        }
    }

    public func busy(_ agent: Int, since: Time?) {
        state.withLock { $0.busySince[agent] = since }
    }

    public func count(agent: Int, _ name: String) {
        state.withLock { $0.tracks[agent].actions[name, default: 0] += 1 }
    }

    public func observe(_ o: FlagObservation, tracked: String) {
        state.withLock { s in
            s.pendingFlags.append(o)
            s.tracks[o.agent].observations += 1
            s.tracks[o.agent].lane.ages.append((o.received, o.ageSeconds))
            s.tracks[o.agent].maxAge = max(s.tracks[o.agent].maxAge, o.ageSeconds ?? 0)
            if o.key == tracked {
                let st: TrackedState
                if let f = o.flag { st = f.isEnabled ? .on : (f.ruleId.isEmpty ? .killed : .off) } else { st = o.flagsServed ? .absent : .none }
                s.tracks[o.agent].lane.tracked.append((o.received, st))
            }
        }
    }

    public func observe(_ o: StatusObservation) {
        state.withLock { s in
            s.pendingStatus.append(o)
            s.tracks[o.agent].observations += 1
            s.tracks[o.agent].lane.ages.append((o.received, o.flagsAgeSeconds))
        }
    }

    public func violation(_ v: Violation) {
        state.withLock { s in
            s.violations.append(v)
            if let a = v.agent, a < s.tracks.count {
                s.tracks[a].lane.violations.append(ViolationMark(time: v.time, invariant: v.invariant, message: v.message))
                if v.invariant == "crash" { s.tracks[a].lane.crashes.append(v.time) }
            }
        }
    }

    public func flagChange(_ c: FlagChange, kind: String) {
        state.withLock {
            $0.changes.append(c)
            $0.flagChangeCounts[kind, default: 0] += 1
        }
    }

    public func note(_ text: String) {
        state.withLock { $0.planNotes.append(text) }
    }

    public func fault(_ f: ArmedFault) {
        state.withLock {
            $0.faults.append(f)
            $0.faultCounts["\(f.method): \(f.kindName)", default: 0] += 1
        }
    }
}
