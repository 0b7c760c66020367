import FoundationEssentials

// The small protocols through which time, disk, randomness and events reach the core
// (docs/architecture.md §3). Real implementations live in AgentPosix; deterministic doubles in
// AgentTestSupport. The network's protocol is `HTTPTransport`.

/// Two kinds of time (docs/architecture.md §4): monotonic seconds for scheduling, wall time for
/// the 24-hour validity that must survive reboots (ST-1, ST-3).
public protocol AgentClock: AnyObject {
    var monotonic: Seconds { get }
    var wall: Date { get }
}

/// Keeps one timer at the agent's next deadline. `Agent` calls `schedule(at:)` after every
/// event; when the time comes the owner calls `Agent.fireDueTimers()`. The daemon implements
/// it with one event-loop timer, `VirtualLoop` with virtual time.
public protocol AgentScheduler: AnyObject {
    /// The earliest monotonic time at which the agent has work; nil when it has none.
    /// Replaces the previous deadline.
    func schedule(at deadline: Seconds?)
}

/// Everything the agent persists, in one record: the device's identity, its user, its
/// flags with their receipt time, and what the rules must remember across restarts.
public struct PersistentState: Sendable, Equatable, Codable {
    /// SE-2: created once, uppercase UUID.
    public var hwid: String
    /// SE-4: nil until set; the HWID is used meanwhile.
    public var userId: String?
    public var push: PushRegistration?
    /// The simulated notification authorization once a client changed it.
    public var notificationAuthorization: NotificationAuthorization?
    /// The last `registerUser` sent: skipped for the same id within 24 h.
    public var registeredUser: RegisteredUser?
    /// Complete responses only (ST-5).
    public var flags: FlagSnapshot?
    /// PR-2: when the primer was last shown.
    public var primerLastShownAt: Date?
    /// A `base_url` the server handed out (A.1), used when no server URL is configured.
    public var baseURL: String?
    /// docs/device-clock.md H: how far the controlled device clock is ahead of the real one (seconds,
    /// only ever growing); nil while the clock was never advanced.
    public var clockOffset: Seconds?

    public init(hwid: String) { self.hwid = hwid }

    public struct PushRegistration: Sendable, Equatable, Codable {
        /// Lowercase hex (A.2).
        public var token: String
        /// `notificationTypes` sent with the registration.
        public var notificationTypes: Int
        /// When `registerDevice` last succeeded; nil while it has not.
        public var registeredAt: Date?

        public init(token: String, notificationTypes: Int, registeredAt: Date?) {
            self.token = token
            self.notificationTypes = notificationTypes
            self.registeredAt = registeredAt
        }
    }

    public struct RegisteredUser: Sendable, Equatable, Codable {
        public var userId: String
        public var at: Date
        public init(userId: String, at: Date) {
            self.userId = userId
            self.at = at
        }
    }
}

/// What loading the store found.
public struct StoreLoad: Sendable, Equatable {
    public var state: PersistentState?
    /// Set when a damaged file was moved aside (ST-6): where, and why.
    public var damage: String?

    public init(state: PersistentState?, damage: String? = nil) {
        self.state = state
        self.damage = damage
    }
}

/// Crash-safe persistence of `PersistentState` (ST-6).
public protocol StateStore: AnyObject {
    /// Never throws for a damaged file: that is set aside and reported in `damage`.
    func load() throws -> StoreLoad
    /// Either the old state or the new one survives a crash at any moment.
    func save(_ state: PersistentState) throws
}

/// Facts about the simulated device reported with `applicationOpen` and `registerDevice` (A.2).
public struct DeviceInfo: Sendable, Equatable {
    public var package: String = "com.pushwoosh.agent"
    public var appVersion: String = "1.0"
    public var osVersion: String = "17.0"
    public var deviceModel: String = "Linux"
    public var language: String = "en"
    /// Seconds east of GMT.
    public var timezoneOffset: Int = 0

    public init() {}
}

/// A problem reading or writing the stored state, and when it last happened (device time).
public struct StorageProblem: Sendable, Equatable {
    public enum Operation: String, Sendable, Equatable {
        /// Loading at start found a damaged file (set aside).
        case load
        /// Saving failed (full disk, read-only directory); retried.
        case save
    }

    public var operation: Operation
    public var message: String
    public var at: Date

    public init(_ operation: Operation, message: String, at: Date) {
        self.operation = operation
        self.message = message
        self.at = at
    }
}

/// Something the agent reports to its owner: the daemon turns these into log lines,
/// socket notifications and `STATUS=` updates.
public enum AgentEvent: Sendable, Equatable {
    /// LS-1, LS-3: the served flags changed. `keys` sorted.
    case flagsChanged(reason: FlagChangeReason, keys: [String])
    case refreshSucceeded(trigger: RefreshTrigger, flagCount: Int, partial: Bool)
    case refreshFailed(trigger: RefreshTrigger, error: RefreshError, retryIn: Seconds?)
    /// A client's `refresh` answered without a request: from the stored flags inside the
    /// throttle window (RF-6, `error` nil), or because no flags URL is configured (RF-8).
    case refreshNotSent(error: RefreshError?)
    /// A device API call other than `getFeatureFlags` finished.
    case callFinished(method: PushwooshAPI.Method, error: RefreshError?)
    case storeFailed(message: String)
    case storeRecovered
    case storeDamaged(message: String)
    case baseURLChanged(String)
}

/// LS-1, LS-3.
public enum FlagChangeReason: String, Sendable, Equatable {
    case refresh, expired, discarded
}

/// What started a flags request (RF-1..RF-5, RF-10).
public enum RefreshTrigger: String, Sendable, Equatable {
    case sessionStart, periodic, pushRegistration, userChange, manual, retry
    /// A configuration reload that changed the application or lifted an RF-11 stop.
    case reload
}

/// RF-7: a refresh error in `PWFeatureFlagsErrorDomain`.
public struct RefreshError: Error, Sendable, Equatable {
    public static let domain = "PWFeatureFlagsErrorDomain"
    /// The HTTP status; 0 no response or not sent; 200 unusable answer.
    public var code: Int
    public var message: String

    public init(code: Int, message: String) {
        self.code = code
        self.message = message
    }
}
