import FoundationEssentials

/// Reads (FF-*): pure functions of the state at `now`. They never wait for the network
/// (FF-3), never write and never notify; flags past their lifetime are not served (ST-3)
/// and are removed by the next event (`expireIfDue`).
extension AgentMachine {
    /// The flags served at `now`.
    func servedFlags(at now: Now) -> ServedFlags? {
        validity.valid(at: now, lifetime: settings.flags.storedFlagsLifetime)
    }

    /// FF-2: the stored flag for `key`, or nil. Keys are case-sensitive.
    public func get(_ key: String, now: Now) -> Evaluation<FeatureFlag?> {
        guard let current = servedFlags(at: now) else {
            return Evaluation(value: nil, provenance: Provenance(reason: .error, errorCode: .providerNotReady,
                                                                 errorMessage: FallbackMessage.providerNotReady, source: .none, ageSeconds: nil))
        }
        let age = current.age(monotonic: now.monotonic, wall: now.wall)
        guard let flag = current.snapshot.flags[key] else {
            return Evaluation(value: nil, provenance: Provenance(reason: .error, errorCode: .flagNotFound,
                                                                 errorMessage: FallbackMessage.flagNotFound(key), source: current.source, ageSeconds: age))
        }
        return Evaluation(value: flag, provenance: Provenance(reason: flag.reason, errorCode: nil, source: current.source, ageSeconds: age))
    }

    /// FF-6: the flag's state, or `defaultValue` when `get` would return nothing.
    public func isEnabled(_ key: String, default defaultValue: Bool, now: Now) -> Evaluation<Bool> {
        let found = get(key, now: now)
        return Evaluation(value: found.value?.isEnabled ?? defaultValue, provenance: found.provenance)
    }

    /// FF-5: a typed property read. Scalar types return `defaultValue` when the property is
    /// missing or of another type; JSON types return `.null` then. Both are TYPE_MISMATCH (the
    /// flag is there; OpenFeature has no code for a missing part of a value); the
    /// `errorMessage` tells "no property P" from "P is a string, not a number".
    public func property(_ key: String, _ name: String, type: PropertyType, default defaultValue: JSONValue, now: Now) -> Evaluation<JSONValue> {
        let fallback: JSONValue = type.isScalar ? defaultValue : .null
        let found = get(key, now: now)
        guard let flag = found.value else { return Evaluation(value: fallback, provenance: found.provenance) }
        guard let value = flag.properties[name], type.matches(value) else {
            var p = found.provenance
            p.reason = .error
            p.errorCode = .typeMismatch
            p.errorMessage = flag.properties[name].map { FallbackMessage.otherType(key, name, found: $0, wanted: type) }
                ?? FallbackMessage.missingProperty(key, name)
            return Evaluation(value: fallback, provenance: p)
        }
        return Evaluation(value: value, provenance: found.provenance)
    }

    /// The keys of the flags served at `now`, sorted; nil when none are valid (B.1
    /// PROVIDER_NOT_READY). For bulk reads (docs/http.md F.1), each key then read with `get`.
    public func servedFlagKeys(now: Now) -> [String]? {
        servedFlags(at: now).map { $0.snapshot.flags.keys.sorted() }
    }

    /// The flags served at `now` and where they came from, as one snapshot (a bulk read
    /// built over several turns of the loop reads one consistent set); nil when none are valid.
    public func servedSnapshot(now: Now) -> (snapshot: FlagSnapshot, source: FlagSource)? {
        servedFlags(at: now).map { ($0.snapshot, $0.source) }
    }

    /// When the flags served at `now` were received; nil when none are valid.
    public func servedFlagsReceivedAt(now: Now) -> Date? { servedFlags(at: now)?.snapshot.receivedAt }

    /// docs/socket-api.md B.2 `status`.
    public func status(now: Now) -> AgentStatus {
        let current = servedFlags(at: now)
        let stateName: AgentStatus.State
        if refresh.fatal { stateName = .fatal }
        else if current == nil { stateName = refresh.lastRefreshError == nil ? .notReady : .error }
        else { stateName = refresh.lastRefreshError == nil ? .ready : .stale }
        func wallTime(_ deadline: Seconds?) -> Date? { deadline.map { now.wall.addingTimeInterval($0 - now.monotonic) } }
        let next = refresh.inFlight != nil ? now.monotonic : [refresh.periodicDeadline, refresh.retryDeadline].compactMap { $0 }.min()
        return AgentStatus(
            state: stateName, applicationCode: settings.server.applicationCode, hwid: state.hwid, userId: userId,
            appState: session.appState, sessionStartedAt: wallTime(session.sessionStartedAt),
            pushRegistered: state.push?.registeredAt != nil, pushToken: state.push?.token,
            notificationAuthorization: notificationAuthorization, flagsCount: current?.snapshot.flags.count ?? 0,
            flagsSource: current?.source ?? .none, flagsAgeSeconds: current?.age(monotonic: now.monotonic, wall: now.wall),
            flagsExpireAt: current.map { $0.snapshot.receivedAt.addingTimeInterval(settings.flags.storedFlagsLifetime) },
            flagsPartial: current?.snapshot.partial ?? false,
            lastRefreshAt: refresh.lastRefreshAt, lastRefreshError: refresh.lastRefreshError,
            consecutiveFailures: refresh.consecutiveFailures,
            nextRefreshAt: wallTime(next), refreshInFlight: refresh.inFlight != nil,
            storageError: storage.failure.map { StorageProblem(.save, message: $0, at: storage.failureAt ?? now.wall) } ?? storage.loadProblem,
            now: now.wall, lastRefreshTrigger: refresh.lastRefreshTrigger)
    }
}

/// docs/socket-api.md B.2 `status`.
public struct AgentStatus: Sendable, Equatable {
    public enum State: String, Sendable {
        case notReady, ready, stale, error, fatal
    }

    public var state: State
    public var applicationCode: String
    public var hwid: String
    public var userId: String
    public var appState: AppState
    public var sessionStartedAt: Date?
    public var pushRegistered: Bool
    public var pushToken: String?
    public var notificationAuthorization: NotificationAuthorization
    public var flagsCount: Int
    public var flagsSource: FlagSource
    public var flagsAgeSeconds: Seconds?
    public var flagsExpireAt: Date?
    public var flagsPartial: Bool
    public var lastRefreshAt: Date?
    public var lastRefreshError: RefreshError?
    public var consecutiveFailures: Int
    public var nextRefreshAt: Date?
    public var refreshInFlight: Bool
    /// The storage problem that matters now: a save failing now (full disk, read-only
    /// directory), else one found when the state was loaded at start (a damaged file set
    /// aside); nil when the state loaded cleanly and every save succeeded.
    public var storageError: StorageProblem?
    /// The device's time at the answer (the controlled clock's when it is controlled): what
    /// the other times are read against (`fleet status` ages). Nil from an agent that does not say.
    public var now: Date?
    /// What started the refresh of `lastRefreshAt` (nil: none yet, or an agent that does not say).
    public var lastRefreshTrigger: RefreshTrigger?

    /// Every field (a client decoding the `status` answer builds one).
    public init(state: State, applicationCode: String, hwid: String, userId: String, appState: AppState, sessionStartedAt: Date?,
                pushRegistered: Bool, pushToken: String?, notificationAuthorization: NotificationAuthorization, flagsCount: Int,
                flagsSource: FlagSource, flagsAgeSeconds: Seconds?, flagsExpireAt: Date?, flagsPartial: Bool, lastRefreshAt: Date?,
                lastRefreshError: RefreshError?, consecutiveFailures: Int, nextRefreshAt: Date?, refreshInFlight: Bool,
                storageError: StorageProblem?, now: Date? = nil, lastRefreshTrigger: RefreshTrigger? = nil) {
        self.state = state
        self.applicationCode = applicationCode
        self.hwid = hwid
        self.userId = userId
        self.appState = appState
        self.sessionStartedAt = sessionStartedAt
        self.pushRegistered = pushRegistered
        self.pushToken = pushToken
        self.notificationAuthorization = notificationAuthorization
        self.flagsCount = flagsCount
        self.flagsSource = flagsSource
        self.flagsAgeSeconds = flagsAgeSeconds
        self.flagsExpireAt = flagsExpireAt
        self.flagsPartial = flagsPartial
        self.lastRefreshAt = lastRefreshAt
        self.lastRefreshError = lastRefreshError
        self.consecutiveFailures = consecutiveFailures
        self.nextRefreshAt = nextRefreshAt
        self.refreshInFlight = refreshInFlight
        self.storageError = storageError
        self.now = now
        self.lastRefreshTrigger = lastRefreshTrigger
    }
}
