import AgentCore
import Foundation

/// Records the agent's events in order.
public final class EventLog {
    public var events: [AgentEvent] = []
    public init() {}

    /// The `flagsChanged` notifications, in order.
    public var changes: [(reason: FlagChangeReason, keys: [String])] {
        events.compactMap { if case .flagsChanged(let r, let k) = $0 { (r, k) } else { nil } }
    }
}

/// The agent's timer in virtual time: holds the deadline the agent last asked for.
public final class VirtualTimer: AgentScheduler {
    public private(set) var deadline: Seconds?
    public init() {}
    public func schedule(at deadline: Seconds?) { self.deadline = deadline }
}

/// Runs an `Agent` in virtual time: the agent's timer and the transport's answers are
/// processed in time order, so days pass in milliseconds with no real sleeps. The agent
/// arms `timer` itself after every call, as it arms the daemon's loop timer.
public final class VirtualLoop {
    public let clock: VirtualClock
    public let transport: ScriptedTransport
    public let store: MemoryStore
    public let log = EventLog()
    public let timer = VirtualTimer()
    public private(set) var agent: Agent
    public var settings: AgentSettings
    private var seed: UInt64

    public init(settings: AgentSettings = VirtualLoop.defaultSettings(), store: MemoryStore = MemoryStore(),
                seed: UInt64 = 1, start: Bool = true) {
        let clock = VirtualClock()
        self.clock = clock
        self.transport = ScriptedTransport(clock: clock)
        self.store = store
        self.settings = settings
        self.seed = seed
        let log = self.log
        self.agent = Agent(settings: settings, clock: clock, transport: transport, store: store,
                           scheduler: timer, random: SeededRandom(seed: seed), onEvent: { log.events.append($0) })
        if start { agent.start() }
    }

    /// The application `ABCDE-12345` against a loopback URL that ends with `json/1.3/`.
    public static func defaultSettings() -> AgentSettings {
        var settings = AgentSettings(server: ServerSettings(applicationCode: "ABCDE-12345",
                                                            serverURL: "http://127.0.0.1:1/json/1.3/"))
        settings.deviceInfo.timezoneOffset = 3600
        return settings
    }

    /// Runs everything due within `seconds` from now, in time order.
    public func run(for seconds: Seconds) {
        run(until: clock.monotonic + seconds)
    }

    public func run(until target: Seconds) {
        var spinsAtSameTime = 0
        while true {
            step()
            let next = [timer.deadline, transport.nextDelivery].compactMap { $0 }.min()
            guard let next, next <= target else { break }
            spinsAtSameTime = next <= clock.monotonic ? spinsAtSameTime + 1 : 0
            precondition(spinsAtSameTime < 10_000, "a timer stays due at \(clock.monotonic): \(agent.status())")
            clock.advance(to: max(next, clock.monotonic))
        }
        clock.advance(to: target)
        step()
    }

    /// Delivers the answers due now, then fires the agent's timer if it is due.
    private func step() {
        transport.deliverDue()
        if let deadline = timer.deadline, deadline <= clock.monotonic { agent.fireDueTimers() }
    }

    /// Delivers answers due now and fires due timers, without moving time.
    public func settle() { run(for: 0) }

    /// A crash (or stop) and restart of the agent process: memory and answers in flight
    /// are lost; the store keeps what was committed; the monotonic clock restarts.
    public func restart(after downtime: Seconds = 1, settings newSettings: AgentSettings? = nil) {
        clock.advance(by: downtime)
        clock.reboot(monotonicOrigin: 5)
        if let newSettings { settings = newSettings }
        seed &+= 1
        transport.dropPending()
        let log = self.log
        agent = Agent(settings: settings, clock: clock, transport: transport, store: store,
                      scheduler: timer, random: SeededRandom(seed: seed), onEvent: { log.events.append($0) })
        agent.start()
    }
}
