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

/// The Pushwoosh iOS SDK core, headless: flags, validity, session, refresh triggers,
/// impressions and the device's registrations (SPEC §1–6).
///
/// Not thread-safe by design: one owner (the daemon's event loop, or a test's virtual
/// loop) calls everything, including the transport's completions. Time never passes
/// inside a call; the owner calls `fireDueTimers()` once `nextDeadline` is reached.
public final class Agent {
    public private(set) var settings: AgentSettings
    let clock: any AgentClock
    private let transport: any HTTPTransport
    private let store: any StateStore
    private var random: AnyRandom
    private let onEvent: (AgentEvent) -> Void

    var state: PersistentState
    private var served: ServedFlags?
    private var session = SessionMachine()
    private var throttle: RefreshThrottle
    private var retryPolicy: RetryPolicy
    private var impressions = ImpressionLedger()

    // Refresh (RF-*).
    private var generation: UInt64 = 0
    private var inFlight: InFlight?
    private var fatal = false
    /// RF-10: no automatic request before this (a `Retry-After` from the server).
    private var retryAfterUntil: Seconds?
    private var consecutiveFailures = 0
    private var lastRefreshAt: Date?
    private var lastRefreshError: RefreshError?
    private var lastFlagsRequestAt: Seconds?
    /// Orders events that may share a timestamp (RF-3: "sent before that registration").
    private var sequence: UInt64 = 0
    private var lastFlagsRequestSequence: UInt64?
    private(set) var pushRegistrationSequence: UInt64 = 0

    // Device calls.
    private var applicationOpenSent = false
    private(set) var registerDeviceInFlight = false
    private(set) var registerDeviceAttempt = 0

    // Push primer (PR-*): the `pushRegistrationSequence` of the registration chain the last
    // accepted primer started; see `Agent.primerBeingAnswered`.
    var primerRegistrationSequence: UInt64?

    // Storage.
    private var storeFailure: String?

    // Timers (monotonic deadlines).
    private var periodicDeadline: Seconds?
    private var retryDeadline: Seconds?
    private var expiryDeadline: Seconds?
    private var registerRetryDeadline: Seconds?
    private var saveRetryDeadline: Seconds?

    private struct InFlight {
        var generation: UInt64
        var trigger: RefreshTrigger
        var waiters: [(RefreshError?) -> Void]
    }

    /// Delays before `registerDevice` retries (A.2, SDK).
    public static let registerDeviceRetryDelays: [Seconds] = [1, 5, 10]
    /// `registerDevice` and `registerUser` are not repeated within this (A.2).
    public static let reRegistrationInterval: Seconds = 24 * 3600
    /// A failed save is retried after this.
    public static let saveRetryDelay: Seconds = 30

    public init(
        settings: AgentSettings, clock: any AgentClock, transport: any HTTPTransport, store: any StateStore,
        random: any RandomNumberGenerator = SystemRandomNumberGenerator(),
        onEvent: @escaping (AgentEvent) -> Void = { _ in }
    ) {
        self.settings = settings
        self.clock = clock
        self.transport = transport
        self.store = store
        self.random = AnyRandom(base: random)
        self.onEvent = onEvent
        self.throttle = RefreshThrottle(window: settings.flags.throttleWindow, disabled: settings.flags.disableThrottle)
        self.retryPolicy = RetryPolicy(refreshInterval: settings.flags.refreshInterval)
        self.state = PersistentState(hwid: "")
    }

    // MARK: - Start

    /// Loads the stored state (creating the HWID on first start), then enters the initial
    /// app state, which starts a session and a refresh when it is `active` (RF-1).
    /// Never waits for the network: the owner can report readiness right after.
    public func start() {
        var damaged: String?
        do {
            let loaded = try store.load()
            damaged = loaded.damage
            if let existing = loaded.state { state = existing }
        } catch {
            damaged = "\(error)"
        }
        if let damaged { onEvent(.storeDamaged(message: damaged)) }
        var dirty = false
        if state.hwid.isEmpty {
            state = PersistentState(hwid: Self.makeHWID(using: &random))  // SE-2
            dirty = true
        }
        if state.userId == nil, let initial = settings.initialUserId, !initial.isEmpty {
            state.userId = initial
            dirty = true
        }
        if let stored = state.flags {
            let now = clock.monotonic, wall = clock.wall
            let wallAge = wall.timeIntervalSince(stored.receivedAt)
            if !stored.belongs(toApplication: settings.server.applicationCode, user: userId) || stored.partial {
                state.flags = nil  // ST-2: never served to another user or application.
                dirty = true
            } else if wallAge < 0 || wallAge >= settings.flags.storedFlagsLifetime {
                // ST-3. A receipt time in the future means the wall clock went back: the
                // age cannot be known, so the flags are not trusted.
                state.flags = nil
                dirty = true
            } else {
                served = ServedFlags(snapshot: stored, source: .cache, monotonicBase: now, ageAtBase: wallAge)
                scheduleExpiry()
            }
        }
        if dirty { persist() }
        if settings.device.initialAppState == .active { _ = setAppState(.active) }
    }

    // MARK: - Reads (FF-*, never wait for the network: FF-3)

    /// FF-2: the stored flag for `key`, or nil. Keys are case-sensitive.
    public func get(_ key: String) -> Evaluation<FeatureFlag?> {
        guard let current = validFlags() else {
            return Evaluation(value: nil, provenance: notReady())
        }
        guard let flag = current.snapshot.flags[key] else {
            return Evaluation(value: nil, provenance: provenance(current, .error, .flagNotFound))
        }
        return Evaluation(value: flag, provenance: provenance(current, flag.reason, nil))
    }

    /// FF-6: the flag's state, or `defaultValue` when `get` would return nothing.
    public func isEnabled(_ key: String, default defaultValue: Bool) -> Evaluation<Bool> {
        let found = get(key)
        guard let flag = found.value else { return Evaluation(value: defaultValue, provenance: found.provenance) }
        return Evaluation(value: flag.isEnabled, provenance: found.provenance)
    }

    /// FF-5: a typed property read. Scalar types return `defaultValue` when the property is
    /// missing or of another type; JSON types return `.null` then.
    public func property(_ key: String, _ name: String, type: PropertyType, default defaultValue: JSONValue) -> Evaluation<JSONValue> {
        let fallback: JSONValue = type.isScalar ? defaultValue : .null
        let found = get(key)
        guard let flag = found.value else { return Evaluation(value: fallback, provenance: found.provenance) }
        guard let value = flag.properties[name], type.matches(value) else {
            var p = found.provenance
            p.reason = .error
            p.errorCode = .typeMismatch
            return Evaluation(value: fallback, provenance: p)
        }
        return Evaluation(value: value, provenance: found.provenance)
    }

    /// The keys of the flags served now, sorted; nil when none are valid (B.1
    /// PROVIDER_NOT_READY). For bulk reads (PROTOCOL F.1), each key then read with `get`.
    public func servedFlagKeys() -> [String]? {
        validFlags().map { $0.snapshot.flags.keys.sorted() }
    }

    /// When the flags served now were received; nil when none are valid.
    public var servedFlagsReceivedAt: Date? { validFlags()?.snapshot.receivedAt }

    /// The flags served now, after enforcing their lifetime (ST-3) at read time.
    private func validFlags() -> ServedFlags? {
        guard let current = served else { return nil }
        if current.isExpired(lifetime: settings.flags.storedFlagsLifetime, monotonic: clock.monotonic, wall: clock.wall) {
            stopServing(.expired)
            return nil
        }
        return current
    }

    private func notReady() -> Provenance {
        Provenance(reason: .error, errorCode: .providerNotReady, source: .none, ageSeconds: nil)
    }

    private func provenance(_ current: ServedFlags, _ reason: EvaluationReason, _ code: EvaluationErrorCode?) -> Provenance {
        Provenance(reason: reason, errorCode: code, source: current.source,
                   ageSeconds: current.age(monotonic: clock.monotonic, wall: clock.wall))
    }

    // MARK: - Refresh (RF-*)

    /// RF-5: refreshes on demand; `completion` runs once, with nil on success.
    /// RF-6: answered from the stored flags inside the throttle window.
    public func refresh(completion: @escaping (RefreshError?) -> Void) {
        fatal = false  // RF-11: a client's refresh lifts the stop.
        if inFlight == nil, throttle.answersFromStore(now: clock.monotonic, flagsValid: validFlags() != nil) {
            completion(nil)
            return
        }
        requestFlags(.manual, completion: completion)
    }

    /// An automatic trigger (RF-1..RF-3, RF-10): deferred while a `Retry-After` holds, to
    /// the moment it ends.
    private func automaticRefresh(_ trigger: RefreshTrigger) {
        if let until = retryAfterUntil, clock.monotonic < until, inFlight == nil {
            retryDeadline = max(retryDeadline ?? until, until)
            return
        }
        requestFlags(trigger)
    }

    /// RF-9: joins the request in flight, or sends one.
    private func requestFlags(_ trigger: RefreshTrigger, completion: ((RefreshError?) -> Void)? = nil) {
        if var current = inFlight {
            if let completion { current.waiters.append(completion) }
            inFlight = current
            return
        }
        guard PushwooshAPI.supportsFeatureFlags(baseURL: baseURL) else {
            // RF-8: no request is ever sent; `refresh` fails with code 0.
            let error = RefreshError(code: 0, message: "server URL does not end with \(PushwooshAPI.flagsPathSuffix): feature flags are not requested")
            completion?(error)
            return
        }
        let sentGeneration = generation
        inFlight = InFlight(generation: sentGeneration, trigger: trigger, waiters: completion.map { [$0] } ?? [])
        sequence += 1
        lastFlagsRequestSequence = sequence
        lastFlagsRequestAt = clock.monotonic
        retryDeadline = nil
        schedulePeriodic()
        // A.1: the N-th automatic retry after N failures says so in `X-Retry-Count`.
        let retryCount = trigger == .retry ? consecutiveFailures : 0
        let request = PushwooshAPI.request(.getFeatureFlags, baseURL: baseURL, common: commonFields,
                                           apiToken: settings.server.apiToken, retryCount: retryCount,
                                           timeout: settings.server.requestTimeout)
        transport.send(request) { [weak self] outcome in
            self?.flagsAnswered(outcome, generation: sentGeneration)
        }
    }

    private func flagsAnswered(_ outcome: HTTPOutcome, generation sentGeneration: UInt64) {
        guard let finished = inFlight else { return }
        inFlight = nil
        if sentGeneration != generation {
            // RF-4: an answer for the previous user (or application) is dropped; whoever
            // waited gets the answer of a request for the current one.
            requestFlags(.userChange)
            if inFlight == nil {
                let error = RefreshError(code: 0, message: "request not sent")
                for waiter in finished.waiters { waiter(error) }
            } else {
                inFlight?.waiters.append(contentsOf: finished.waiters)
            }
            return
        }
        let result = PushwooshAPI.classify(outcome).flatMap { success -> Result<(PushwooshAPI.FlagsResponse, String?), PushwooshAPI.Failure> in
            PushwooshAPI.parseFlags(success.response).map { ($0, success.baseURL) }
        }
        let error: RefreshError?
        switch result {
        case .success(let (response, newBaseURL)):
            error = nil
            applyFlags(response, trigger: finished.trigger)
            adoptBaseURL(newBaseURL)
        case .failure(let failure):
            error = RefreshError(code: failure.code, message: failure.message)
            refreshFailed(failure, trigger: finished.trigger)
        }
        for waiter in finished.waiters { waiter(error) }
    }

    private func applyFlags(_ response: PushwooshAPI.FlagsResponse, trigger: RefreshTrigger) {
        let now = clock.monotonic, wall = clock.wall
        let previous = validFlags()?.snapshot.flags ?? [:]
        let snapshot = FlagSnapshot(flags: response.flags, receivedAt: wall, applicationCode: settings.server.applicationCode,
                                    userId: userId, partial: response.partial)
        served = ServedFlags(snapshot: snapshot, source: .network, monotonicBase: now, ageAtBase: 0)
        consecutiveFailures = 0
        lastRefreshAt = wall
        lastRefreshError = nil
        retryDeadline = nil
        retryAfterUntil = nil
        scheduleExpiry()
        if !response.partial {
            // ST-5: only complete responses are written, and only they open a throttle window.
            state.flags = snapshot
            throttle.recordCompleteResponse(at: now)
            persist()
        }
        onEvent(.refreshSucceeded(trigger: trigger, flagCount: response.flags.count, partial: response.partial))
        let changed = FlagSnapshot.changedKeys(from: previous, to: response.flags)
        if !changed.isEmpty { onEvent(.flagsChanged(reason: .refresh, keys: changed)) }  // LS-1
    }

    private func refreshFailed(_ failure: PushwooshAPI.Failure, trigger: RefreshTrigger) {
        consecutiveFailures += 1
        lastRefreshAt = clock.wall
        let error = RefreshError(code: failure.code, message: failure.message)
        lastRefreshError = error
        var retryIn: Seconds?
        if failure.isFatal {
            fatal = true  // RF-11
            periodicDeadline = nil
            retryDeadline = nil
        } else if session.appState == .active {
            // RF-10: retry automatic refreshes with capped backoff and jitter.
            let delay = retryPolicy.delay(failures: consecutiveFailures, retryAfter: failure.retryAfter,
                                          unit: Double.random(in: 0..<1, using: &random))
            retryDeadline = clock.monotonic + delay
            retryIn = delay
        }
        // RF-10: the server's Retry-After holds every automatic trigger, the hourly one too.
        retryAfterUntil = failure.retryAfter.map { clock.monotonic + $0 }
        onEvent(.refreshFailed(trigger: trigger, error: error, retryIn: retryIn))
    }

    private func adoptBaseURL(_ newBaseURL: String?) {
        // A.1: switch only when no server URL is configured, and only from a success.
        guard settings.server.serverURL == nil, let newBaseURL, newBaseURL != state.baseURL else { return }
        state.baseURL = newBaseURL
        persist()
        onEvent(.baseURLChanged(newBaseURL))
    }

    /// LS-3, ST-2, ST-3: stops serving the current flags and says why.
    private func stopServing(_ reason: FlagChangeReason) {
        guard let current = served else { return }
        served = nil
        expiryDeadline = nil
        if state.flags != nil {
            state.flags = nil
            persist()
        }
        let keys = current.snapshot.flags.keys.sorted()
        onEvent(.flagsChanged(reason: reason, keys: keys))
    }

    // MARK: - Session and device (SE-*)

    /// SE-1: moves between active and background; a new session starts a refresh (RF-1).
    @discardableResult
    public func setAppState(_ newState: AppState) -> Bool {
        let now = clock.monotonic
        let started = session.transition(to: newState, now: now, sessionTimeout: settings.flags.sessionTimeout)
        switch session.appState {
        case .background:
            // RF-2 runs in the foreground only; a failed refresh is retried there too.
            periodicDeadline = nil
            retryDeadline = nil
        case .active:
            if started {
                impressions.reset()  // IM-3: per session.
                if !applicationOpenSent {
                    applicationOpenSent = true
                    sendApplicationOpen()
                }
                if !fatal { automaticRefresh(.sessionStart) }
            } else {
                schedulePeriodic()
            }
        }
        return started
    }

    /// SE-4, RF-4: sets the User ID, discards the previous user's flags at once, tells the
    /// server (`registerUser`, skipped for the same id within 24 h) and refreshes.
    public func setUserId(_ newUserId: String) {
        let changed = newUserId != userId
        if changed {
            state.userId = newUserId
            generation &+= 1  // an answer for the previous user is dropped
            fatal = false  // RF-11
            consecutiveFailures = 0
            retryDeadline = nil
            retryAfterUntil = nil
            throttle.reset()
            impressions.reset()  // IM-3: the new user's first exposure is never suppressed.
            if served != nil { stopServing(.discarded) } else { state.flags = nil }
            persist()
        }
        if let last = state.registeredUser, last.userId == newUserId,
           clock.wall.timeIntervalSince(last.at) < Self.reRegistrationInterval {
            // Told the server within 24 h already.
        } else {
            sendRegisterUser(newUserId)
        }
        // RF-4. With a request in flight this joins it (RF-9: never overlap); its answer,
        // for the previous user, is dropped and starts the request for the new one.
        if changed { requestFlags(.userChange) }
    }

    /// SE-3: registers for push with the simulated system prompt and token.
    public func registerForPushNotifications() -> (granted: Bool, pushToken: String?) {
        var authorization = notificationAuthorization
        if authorization == .notDetermined {
            // The system prompt, answered by the simulated user.
            authorization = settings.device.permissionPromptAnswer == .allow ? .authorized : .denied
            state.notificationAuthorization = authorization
        }
        guard authorization != .denied else {
            persist()
            return (false, nil)
        }
        let token = state.push?.token ?? Self.makePushToken(using: &random)
        let types = authorization.allowsNotifications ? 7 : 0
        if let existing = state.push, existing.token == token, existing.notificationTypes == types,
           let at = existing.registeredAt, clock.wall.timeIntervalSince(at) < Self.reRegistrationInterval {
            persist()
            return (true, token)  // nothing changed within 24 h
        }
        state.push = PersistentState.PushRegistration(token: token, notificationTypes: types, registeredAt: nil)
        persist()
        registerDeviceAttempt = 0
        registerRetryDeadline = nil
        sequence += 1
        pushRegistrationSequence = sequence
        sendRegisterDevice()
        return (true, token)
    }

    /// SE-3: unregisters from push.
    public func unregisterForPushNotifications() {
        state.push = nil
        registerRetryDeadline = nil
        persist()
        send(.unregisterDevice, fields: [:]) { [weak self] result in
            self?.onEvent(.callFinished(method: .unregisterDevice, error: result.failure))
        }
    }

    public func setNotificationAuthorization(_ status: NotificationAuthorization) {
        state.notificationAuthorization = status
        persist()
    }

    public var notificationAuthorization: NotificationAuthorization {
        state.notificationAuthorization ?? settings.device.notificationAuthorization
    }

    // MARK: - Impressions (IM-*)

    /// IM-1..IM-4: sends `PW_FeatureFlagImpression` once per flag, rule and state per
    /// session. Returns whether one was sent (false: no flag, or already sent).
    public func logImpression(_ key: String) -> Bool {
        guard let flag = get(key).value else { return false }
        let ledgerKey = ImpressionLedger.Key(flag: flag.key, rule: flag.ruleId, enabled: flag.isEnabled)
        guard impressions.claim(ledgerKey) else { return false }
        let sentGeneration = generation
        postEvent("PW_FeatureFlagImpression", attributes: [
            "flag_key": .string(flag.key), "rule_id": .string(flag.ruleId), "enabled": .bool(flag.isEnabled),
        ]) { [weak self] error in
            guard let self else { return }
            // IM-4: a failed impression is sent again on the next call.
            if error != nil, sentGeneration == self.generation { self.impressions.release(ledgerKey) }
        }
        return true
    }

    /// `postEvent` (A.2).
    public func postEvent(_ event: String, attributes: [String: JSONValue], completion: @escaping (RefreshError?) -> Void = { _ in }) {
        let utc = Int(clock.wall.timeIntervalSince1970)
        send(.postEvent, fields: [
            "event": .string(event), "attributes": .object(attributes),
            "timestampUTC": .number(Double(utc)),
            "timestampCurrent": .number(Double(utc + settings.deviceInfo.timezoneOffset)),
        ]) { [weak self] result in
            self?.onEvent(.callFinished(method: .postEvent, error: result.failure))
            completion(result.failure)
        }
    }

    // MARK: - Configuration reload

    /// SIGHUP: takes new settings. A new application code invalidates the flags (ST-2);
    /// a reload lifts the stop after 401/403 (RF-11).
    public func reload(_ newSettings: AgentSettings) {
        let codeChanged = newSettings.server.applicationCode != settings.server.applicationCode
        let wasFatal = fatal
        settings = newSettings
        throttle.window = newSettings.flags.throttleWindow
        throttle.disabled = newSettings.flags.disableThrottle
        retryPolicy = RetryPolicy(refreshInterval: newSettings.flags.refreshInterval)
        fatal = false
        if codeChanged {
            generation &+= 1
            throttle.reset()
            impressions.reset()
            if served != nil { stopServing(.discarded) } else { state.flags = nil; persist() }
        } else if served != nil {
            scheduleExpiry()
        }
        if session.appState == .active, codeChanged || wasFatal {
            requestFlags(.reload)
        } else {
            schedulePeriodic()
        }
    }

    // MARK: - Timers

    /// The earliest monotonic time at which `fireDueTimers()` has work.
    public var nextDeadline: Seconds? {
        [periodicDeadline, retryDeadline, expiryDeadline, registerRetryDeadline, saveRetryDeadline]
            .compactMap { $0 }.min()
    }

    /// Runs every timer whose deadline has passed.
    public func fireDueTimers() {
        let now = clock.monotonic
        if let d = expiryDeadline, d <= now {
            expiryDeadline = nil
            if validFlags() != nil { scheduleExpiry() }  // the read expires them if due (LS-3)
        }
        if let d = saveRetryDeadline, d <= now {
            saveRetryDeadline = nil
            persist()
        }
        if let d = registerRetryDeadline, d <= now {
            registerRetryDeadline = nil
            sendRegisterDevice()
        }
        if let d = retryDeadline, d <= now {
            retryDeadline = nil
            if session.appState == .active, !fatal { automaticRefresh(.retry) }
        }
        if let d = periodicDeadline, d <= now {
            periodicDeadline = nil
            if session.appState == .active, !fatal {
                automaticRefresh(.periodic)  // RF-2; joins a request in flight (RF-9)
                if periodicDeadline == nil { schedulePeriodic(after: now) }
            }
        }
    }

    /// RF-2, RF-12: the next hourly refresh, offset by a stable per-device amount plus a
    /// little jitter, together within 10% of the period.
    private func schedulePeriodic(after floor: Seconds? = nil) {
        guard session.appState == .active, !fatal else {
            periodicDeadline = nil
            return
        }
        let interval = settings.flags.refreshInterval
        let anchor = max(lastFlagsRequestAt ?? clock.monotonic, floor ?? -.infinity)
        let offset = Self.deviceOffset(hwid: state.hwid, period: interval)
        let jitter = Double.random(in: 0..<1, using: &random) * interval * 0.02
        periodicDeadline = max(clock.monotonic, anchor + interval + offset + jitter)
    }

    /// RF-12: a stable per-device share of the period, below 8% (jitter adds up to 2%).
    public static func deviceOffset(hwid: String, period: Seconds) -> Seconds {
        Double(fnv1a(hwid) % 10_000) / 10_000 * period * 0.08
    }

    private func scheduleExpiry() {
        expiryDeadline = served?.expiresAt(lifetime: settings.flags.storedFlagsLifetime)
    }

    // MARK: - Device API calls

    private var baseURL: String {
        settings.server.serverURL ?? state.baseURL ?? PushwooshAPI.defaultBaseURL(applicationCode: settings.server.applicationCode)
    }

    /// The User ID in effect: the HWID until one is set (A.1).
    public var userId: String { state.userId ?? state.hwid }
    public var hwid: String { state.hwid }

    private var commonFields: PushwooshAPI.CommonFields {
        PushwooshAPI.CommonFields(applicationCode: settings.server.applicationCode, hwid: state.hwid, userId: userId)
    }

    private var deviceFields: [String: JSONValue] {
        let info = settings.deviceInfo
        return [
            "package": .string(info.package), "timezone": .string(String(info.timezoneOffset)),
            "app_version": .string(info.appVersion), "os_version": .string(info.osVersion),
            "device_model": .string(info.deviceModel), "language": .string(info.language),
            "notificationTypes": .number(Double(notificationAuthorization.allowsNotifications ? 7 : 0)),
        ]
    }

    private func send(_ method: PushwooshAPI.Method, fields: [String: JSONValue], retryCount: Int = 0,
                      completion: @escaping (Result<PushwooshAPI.Success, PushwooshAPI.Failure>) -> Void) {
        let request = PushwooshAPI.request(method, baseURL: baseURL, common: commonFields, fields: fields,
                                           apiToken: settings.server.apiToken, retryCount: retryCount,
                                           timeout: settings.server.requestTimeout)
        transport.send(request) { outcome in completion(PushwooshAPI.classify(outcome)) }
    }

    private func sendApplicationOpen() {
        send(.applicationOpen, fields: deviceFields) { [weak self] result in
            self?.onEvent(.callFinished(method: .applicationOpen, error: result.failure))
        }
    }

    private func sendRegisterUser(_ id: String) {
        send(.registerUser, fields: [:]) { [weak self] result in
            guard let self else { return }
            if case .success = result {
                self.state.registeredUser = PersistentState.RegisteredUser(userId: id, at: self.clock.wall)
                self.persist()
            }
            self.onEvent(.callFinished(method: .registerUser, error: result.failure))
        }
    }

    private func sendRegisterDevice() {
        guard let push = state.push, !registerDeviceInFlight else { return }
        registerDeviceInFlight = true
        var fields = deviceFields
        fields["push_token"] = .string(push.token)
        fields["gateway"] = .string(settings.device.pushGateway)
        send(.registerDevice, fields: fields, retryCount: registerDeviceAttempt) { [weak self] result in
            guard let self else { return }
            self.registerDeviceInFlight = false
            switch result {
            case .success:
                guard self.state.push?.token == push.token else { return }
                self.state.push?.registeredAt = self.clock.wall
                self.persist()
                self.onEvent(.callFinished(method: .registerDevice, error: nil))
                // RF-3: refresh when the previous flags request was sent before the registration.
                if self.session.appState == .active, (self.lastFlagsRequestSequence ?? 0) < self.pushRegistrationSequence {
                    self.automaticRefresh(.pushRegistration)
                }
            case .failure(let failure):
                self.onEvent(.callFinished(method: .registerDevice, error: RefreshError(code: failure.code, message: failure.message)))
                if failure.retryable, self.registerDeviceAttempt < Self.registerDeviceRetryDelays.count, self.state.push != nil {
                    self.registerRetryDeadline = self.clock.monotonic + Self.registerDeviceRetryDelays[self.registerDeviceAttempt]
                    self.registerDeviceAttempt += 1
                }
            }
        }
    }

    // MARK: - Persistence

    func persist() {
        do {
            try store.save(state)
            saveRetryDeadline = nil
            if storeFailure != nil {
                storeFailure = nil
                onEvent(.storeRecovered)
            }
        } catch {
            let message = "\(error)"
            if storeFailure != message { onEvent(.storeFailed(message: message)) }
            storeFailure = message
            saveRetryDeadline = clock.monotonic + Self.saveRetryDelay
        }
    }

    // MARK: - Status

    public func status() -> AgentStatus {
        let current = validFlags()
        let now = clock.monotonic, wall = clock.wall
        let age = current?.age(monotonic: now, wall: wall)
        let stateName: AgentStatus.State
        if fatal { stateName = .fatal }
        else if current == nil { stateName = lastRefreshError == nil ? .notReady : .error }
        else { stateName = lastRefreshError == nil ? .ready : .stale }
        func wallTime(_ deadline: Seconds?) -> Date? { deadline.map { wall.addingTimeInterval($0 - now) } }
        let next = inFlight != nil ? now : [periodicDeadline, retryDeadline].compactMap { $0 }.min()
        return AgentStatus(
            state: stateName, applicationCode: settings.server.applicationCode, hwid: state.hwid, userId: userId,
            appState: session.appState, sessionStartedAt: wallTime(session.sessionStartedAt),
            pushRegistered: state.push?.registeredAt != nil, pushToken: state.push?.token,
            notificationAuthorization: notificationAuthorization, flagsCount: current?.snapshot.flags.count ?? 0,
            flagsSource: current?.source ?? .none, flagsAgeSeconds: age,
            flagsExpireAt: current.map { $0.snapshot.receivedAt.addingTimeInterval(settings.flags.storedFlagsLifetime) },
            flagsPartial: current?.snapshot.partial ?? false,
            lastRefreshAt: lastRefreshAt, lastRefreshError: lastRefreshError, consecutiveFailures: consecutiveFailures,
            nextRefreshAt: wallTime(next), refreshInFlight: inFlight != nil, storageError: storeFailure)
    }

    // MARK: - Identifiers

    /// SE-2: an uppercase RFC 4122 version-4 UUID.
    static func makeHWID(using random: inout some RandomNumberGenerator) -> String {
        var bytes = (0..<16).map { _ in UInt8.random(in: 0...255, using: &random) }
        bytes[6] = (bytes[6] & 0x0F) | 0x40
        bytes[8] = (bytes[8] & 0x3F) | 0x80
        let hex = bytes.hexString(uppercase: true)
        let parts = [hex.prefix(8), hex.dropFirst(8).prefix(4), hex.dropFirst(12).prefix(4),
                     hex.dropFirst(16).prefix(4), hex.dropFirst(20)]
        return parts.joined(separator: "-")
    }

    /// A simulated APNs device token: 32 bytes, lowercase hex (A.2).
    static func makePushToken(using random: inout some RandomNumberGenerator) -> String {
        (0..<32).map { _ in UInt8.random(in: 0...255, using: &random) }.hexString()
    }
}

extension Result {
    var failure: RefreshError? {
        guard case .failure(let error) = self else { return nil }
        if let f = error as? PushwooshAPI.Failure { return RefreshError(code: f.code, message: f.message) }
        return RefreshError(code: 0, message: "\(error)")
    }
}

/// PROTOCOL B.2 `status`.
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
    /// Set while the state cannot be written (full disk, read-only directory).
    public var storageError: String?
}

/// Lets the agent hold any generator (the system's, or a seeded one in tests).
struct AnyRandom: RandomNumberGenerator {
    var base: any RandomNumberGenerator
    mutating func next() -> UInt64 { base.next() }
}
