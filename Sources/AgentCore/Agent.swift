import FoundationEssentials

/// Everything the core needs to know from the configuration.
public struct AgentSettings: Sendable, Equatable {
    public var server: ServerSettings
    public var flags = FeatureFlagSettings()
    public var device = DeviceSettings()
    public var deviceInfo = DeviceInfo()
    /// `UserId=`: the User ID at first start.
    public var initialUserId: String?

    public init(server: ServerSettings) { self.server = server }
}

/// The interpreter of `AgentMachine`, and the one entry point into the core for the daemon
/// and the virtual loop alike. Each call reads `now` from the clock, hands the event to the
/// machine, performs the actions it returns against the ports (transport, store), tells the
/// scheduler the next deadline, and only then delivers notifications (`onEvent`) and
/// completions: by construction no caller can forget a timer, and a subscriber never sees
/// a change half made. Reads go straight to the machine and change nothing.
///
/// Not thread-safe by design: one owner (the daemon's event loop, or a test's virtual
/// loop) calls everything, including the transport's completions and the scheduler's timer.
/// A notification or completion may call back in: the machine is complete by then.
public final class Agent {
    public private(set) var machine: AgentMachine
    private let clock: any AgentClock
    private let transport: any HTTPTransport
    private let store: any StateStore
    /// Unowned: the owner keeps its scheduler (which calls back into the agent) alive.
    private unowned let scheduler: any AgentScheduler
    private let onEvent: (AgentEvent) -> Void
    private var waiters: [Waiter: (RefreshError?) -> Void] = [:]
    private var lastWaiter: UInt64 = 0
    /// While `checkingSaves` runs: the first save that failed in it (nil: none failed).
    private var failedSaveInCall: String?
    private var checkingDepth = 0

    /// A failed save is retried after this.
    public static let saveRetryDelay = AgentMachine.saveRetryDelay

    public init(
        settings: AgentSettings, clock: any AgentClock, transport: any HTTPTransport, store: any StateStore,
        scheduler: any AgentScheduler, random: any RandomNumberGenerator = SystemRandomNumberGenerator(),
        onEvent: @escaping (AgentEvent) -> Void = { _ in }
    ) {
        self.clock = clock
        self.transport = transport
        self.store = store
        self.scheduler = scheduler
        self.onEvent = onEvent
        self.machine = AgentMachine(settings: settings, random: random, now: Now(monotonic: clock.monotonic, wall: clock.wall))
    }

    // MARK: - The interpreter

    /// Performs `actions` in order: sends and the save first, then the next deadline, then
    /// notifications and completions.
    private func perform(_ actions: [AgentAction]) {
        var deliveries: [AgentAction] = []
        for action in actions {
            switch action {
            case .send(let request, let call):
                transport.send(request) { [weak self] outcome in
                    guard let self else { return }
                    self.perform(self.machine.answered(call, outcome, now: self.now))
                }
            case .persist(let state):
                var failure: String?
                do { try store.save(state) } catch { failure = "\(error)" }
                if checkingDepth > 0, failedSaveInCall == nil { failedSaveInCall = failure }
                deliveries += machine.saved(error: failure, now: now)
            case .notify, .complete:
                deliveries.append(action)
            }
        }
        scheduler.schedule(at: machine.nextDeadline)
        for delivery in deliveries {
            switch delivery {
            case .notify(let event):
                onEvent(event)
            case .complete(let waiter, let error):
                guard let completion = waiters.removeValue(forKey: waiter) else {
                    preconditionFailure("\(waiter) completed twice, or never waited: \(waiters.keys)")
                }
                completion(error)
            case .send, .persist:
                preconditionFailure("saving returns notifications only, not \(delivery)")
            }
        }
    }

    private func wait(_ completion: @escaping (RefreshError?) -> Void) -> Waiter {
        lastWaiter += 1
        let waiter = Waiter(lastWaiter)
        waiters[waiter] = completion
        return waiter
    }

    /// Runs `body` (calls into the agent) and reports the first save in it that failed:
    /// a state-changing method whose change was not stored answers an error, not success.
    /// The change itself stays in memory, and the save is retried (`saveRetryDelay`).
    public func checkingSaves<Result>(_ body: () -> Result) -> (result: Result, saveFailure: String?) {
        let outer = failedSaveInCall
        failedSaveInCall = nil
        checkingDepth += 1
        let result = body()
        checkingDepth -= 1
        let failure = failedSaveInCall
        failedSaveInCall = outer ?? failure
        return (result, failure)
    }

    // MARK: - Events

    /// Loads the stored state (creating the HWID on first start), then enters the initial
    /// app state, which starts a session and a refresh when it is `active` (RF-1).
    /// Never waits for the network: the owner can report readiness right after.
    public func start() { start(Self.load(store)) }

    /// `start()` with the state already loaded (the daemon reads the device clock's offset
    /// from it first, docs/device-clock.md H).
    public func start(_ loaded: StoreLoad) { perform(machine.start(loaded, now: now)) }

    /// Loads the stored state; a store that cannot be read at all counts as damaged.
    public static func load(_ store: any StateStore) -> StoreLoad {
        do { return try store.load() } catch { return StoreLoad(state: nil, damage: "\(error)") }
    }

    /// docs/device-clock.md H: the device clock moved; its offset is saved with the state now (`save`)
    /// or with the next save.
    public func clockOffsetChanged(_ offset: Seconds, save: Bool = true) {
        perform(machine.clockOffsetChanged(offset, save: save, now: now))
    }

    /// The scheduler's timer: runs every timer whose deadline has passed.
    public func fireDueTimers() { perform(machine.fireDueTimers(now: now)) }

    /// RF-5: refreshes on demand; `completion` runs once, with nil on success.
    public func refresh(completion: @escaping (RefreshError?) -> Void) {
        perform(machine.refresh(wait(completion), now: now))
    }

    /// SE-1: returns whether a session started (RF-1).
    @discardableResult
    public func setAppState(_ state: AppState) -> Bool {
        let (started, actions) = machine.setAppState(state, now: now)
        perform(actions)
        return started
    }

    /// SE-4, RF-4.
    public func setUserId(_ userId: String) { perform(machine.setUserId(userId, now: now)) }

    /// SE-3.
    public func registerForPushNotifications() -> (granted: Bool, pushToken: String?) {
        let (granted, token, actions) = machine.registerForPushNotifications(now: now)
        perform(actions)
        return (granted, token)
    }

    /// SE-3.
    public func unregisterForPushNotifications() { perform(machine.unregisterForPushNotifications(now: now)) }

    public func setNotificationAuthorization(_ status: NotificationAuthorization) {
        perform(machine.setNotificationAuthorization(status, now: now))
    }

    /// IM-1..IM-4: whether an impression was sent.
    public func logImpression(_ key: String) -> Bool {
        let (logged, actions) = machine.logImpression(key, now: now)
        perform(actions)
        return logged
    }

    /// `postEvent` (A.2).
    public func postEvent(_ event: String, attributes: [String: JSONValue], completion: @escaping (RefreshError?) -> Void = { _ in }) {
        perform(machine.postEvent(event, attributes: attributes, waiter: wait(completion), now: now))
    }

    /// PR-1..PR-5.
    public func presentPushPrimer(_ configuration: PrimerConfiguration) -> PrimerResult {
        let (result, actions) = machine.presentPushPrimer(configuration, now: now)
        perform(actions)
        return result
    }

    /// SIGHUP: takes new settings (ST-2, RF-11).
    public func reload(_ settings: AgentSettings) { perform(machine.reload(settings, now: now)) }

    // MARK: - Reads (pure: FF-3, ST-3)

    public var settings: AgentSettings { machine.settings }
    public var nextDeadline: Seconds? { machine.nextDeadline }
    /// SE-1: when the session ends if the app stays in the background (device time).
    public var sessionEndsAt: Seconds? { machine.sessionEndsAt }
    public var timers: [(kind: AgentMachine.TimerKind, deadline: Seconds)] { machine.timers }
    /// The device's time now (the clock the agent was given).
    public var now: Now { Now(monotonic: clock.monotonic, wall: clock.wall) }
    public var userId: String { machine.userId }
    public var hwid: String { machine.hwid }
    public var notificationAuthorization: NotificationAuthorization { machine.notificationAuthorization }

    // The socket's hot reads reach the machine in place (`inPlace`): read as a value
    // (`machine.get(…)`), the whole machine was copied for each read, every reference in it
    // retained and released, since the optimizer cannot tell that the read leaves the agent
    // alone. The reads are pure (AgentMachine+Reads.swift): nothing is written through the access.
    public func get(_ key: String) -> Evaluation<FeatureFlag?> { get(key, at: now) }

    public func isEnabled(_ key: String, default defaultValue: Bool) -> Evaluation<Bool> {
        isEnabled(key, default: defaultValue, at: now)
    }

    /// `get` at `now`, a time read from this agent's clock (`now`) for several reads that came
    /// together: the socket reads the clock once for all the lines of one read, not per line.
    public func get(_ key: String, at now: Now) -> Evaluation<FeatureFlag?> {
        Self.inPlace(&machine) { $0.get(key, now: now) }
    }

    /// `isEnabled` at `now` (as `get(_:at:)`).
    public func isEnabled(_ key: String, default defaultValue: Bool, at now: Now) -> Evaluation<Bool> {
        Self.inPlace(&machine) { $0.isEnabled(key, default: defaultValue, now: now) }
    }

    @inline(__always)
    private static func inPlace<Result>(_ machine: inout AgentMachine, _ read: (inout AgentMachine) -> Result) -> Result {
        read(&machine)
    }

    public func property(_ key: String, _ name: String, type: PropertyType, default defaultValue: JSONValue) -> Evaluation<JSONValue> {
        let now = self.now
        return machine.property(key, name, type: type, default: defaultValue, now: now)
    }

    public func servedFlagKeys() -> [String]? { machine.servedFlagKeys(now: now) }
    public var servedFlagsReceivedAt: Date? { machine.servedFlagsReceivedAt(now: now) }
    public func servedSnapshot() -> (snapshot: FlagSnapshot, source: FlagSource)? { machine.servedSnapshot(now: now) }
    public func status() -> AgentStatus { machine.status(now: now) }
    /// RF-6: the device time the throttle window ends, while a `refresh` now would be
    /// answered from the stored flags; nil when it would be sent.
    public func throttleWindowEnd() -> Date? { machine.throttleWindowEnd(now: now) }

    /// RF-12: a device's stable place in the period, 1% to 9% of it (the refresh machine's;
    /// public for the tests that predict a device's slots).
    public static func deviceOffset(hwid: String, period: Seconds) -> Seconds {
        RefreshMachine.deviceOffset(hwid: hwid, period: period)
    }
}
