import FoundationEssentials

/// What the registration machine asks for; `AgentMachine` turns it into actions.
enum RegistrationOutput: Sendable, Equatable {
    /// SE-3: `registerDevice` for `token`, `X-Retry-Count: retryCount` on retries (A.1).
    case registerDevice(token: String, retryCount: Int)
    /// SE-4.
    case registerUser(String)
    /// RF-3: the registration succeeded and no flags request followed it yet.
    case refreshFlags
    case notify(AgentEvent)
}

/// The device's registrations towards the server (SE-3, SE-4, A.2): the `registerDevice`
/// chain and its retries, and `registerUser` once a day. What is registered lives in
/// `PersistentState` (`push`, `registeredUser`), passed in.
struct RegistrationMachine: Sendable {
    /// SE-3: a `registerDevice` is in flight.
    private(set) var deviceInFlight = false
    /// SE-3: the retry number of the next `registerDevice` (0: the first send).
    private(set) var deviceAttempt = 0
    /// SE-3: when the failed `registerDevice` is sent again.
    private(set) var retryDeadline: Seconds?
    /// Counts registration chains (one per `registerForPushNotifications` that registers).
    private(set) var chain: UInt64 = 0
    /// RF-3: how many flags requests had been sent when the last chain started.
    private var flagsRequestsAtRegistration: UInt64 = 0
    /// PR-4: the `chain` the last accepted primer started.
    var primerChain: UInt64?

    /// Delays before `registerDevice` retries (A.2, SDK).
    static let retryDelays: [Seconds] = [1, 5, 10]
    /// `registerDevice` and `registerUser` are not repeated within this (A.2).
    static let reRegistrationInterval: Seconds = 24 * 3600

    /// SE-4: `registerUser`, unless the server was told of this id within 24 h.
    func setUser(_ id: String, registered: PersistentState.RegisteredUser?, now: Now) -> [RegistrationOutput] {
        if let last = registered, last.userId == id, now.wall.timeIntervalSince(last.at) < Self.reRegistrationInterval { return [] }
        return [.registerUser(id)]
    }

    func userAnswered(_ id: String, _ result: Result<PushwooshAPI.Success, PushwooshAPI.Failure>, _ state: inout PersistentState, now: Now) -> [RegistrationOutput] {
        if case .success = result { state.registeredUser = PersistentState.RegisteredUser(userId: id, at: now.wall) }
        return [.notify(.callFinished(method: .registerUser, error: result.failure))]
    }

    /// SE-3: registers with the simulated system prompt (answered `prompt`) and token.
    mutating func register(_ state: inout PersistentState, authorization current: NotificationAuthorization, prompt: PermissionPromptAnswer,
                           flagsRequestsSent: UInt64, now: Now, _ random: inout some RandomNumberGenerator)
        -> (granted: Bool, pushToken: String?, outputs: [RegistrationOutput]) {
        var authorization = current
        if authorization == .notDetermined {
            // The system prompt, answered by the simulated user.
            authorization = prompt == .allow ? .authorized : .denied
            state.notificationAuthorization = authorization
        }
        guard authorization != .denied else { return (false, nil, []) }
        let token = state.push?.token ?? AgentMachine.makePushToken(using: &random)
        let types = authorization.allowsNotifications ? 7 : 0
        if let existing = state.push, existing.token == token, existing.notificationTypes == types,
           let at = existing.registeredAt, now.wall.timeIntervalSince(at) < Self.reRegistrationInterval {
            return (true, token, [])  // nothing changed within 24 h
        }
        state.push = PersistentState.PushRegistration(token: token, notificationTypes: types, registeredAt: nil)
        deviceAttempt = 0
        retryDeadline = nil
        chain += 1
        flagsRequestsAtRegistration = flagsRequestsSent
        return (true, token, sendDevice(state))
    }

    /// SE-3: unregistering ends the chain's retries.
    mutating func unregister(_ state: inout PersistentState) {
        state.push = nil
        retryDeadline = nil
    }

    /// SE-3: one `registerDevice` at a time.
    mutating func sendDevice(_ state: PersistentState) -> [RegistrationOutput] {
        guard let push = state.push, !deviceInFlight else { return [] }
        deviceInFlight = true
        return [.registerDevice(token: push.token, retryCount: deviceAttempt)]
    }

    mutating func deviceAnswered(_ token: String, _ result: Result<PushwooshAPI.Success, PushwooshAPI.Failure>,
                                 _ state: inout PersistentState, flagsRequestsSent: UInt64, now: Now) -> [RegistrationOutput] {
        guard deviceInFlight else { preconditionFailure("a registerDevice answer with none in flight: \(self)") }
        deviceInFlight = false
        switch result {
        case .success:
            guard state.push?.token == token else { return [] }
            state.push?.registeredAt = now.wall
            // RF-3: refresh when the previous flags request was sent before the registration.
            return [.notify(.callFinished(method: .registerDevice, error: nil))]
                + (flagsRequestsSent == flagsRequestsAtRegistration ? [.refreshFlags] : [])
        case .failure(let failure):
            if failure.retryable, deviceAttempt < Self.retryDelays.count, state.push != nil {
                retryDeadline = now.monotonic + Self.retryDelays[deviceAttempt]
                deviceAttempt += 1
            }
            return [.notify(.callFinished(method: .registerDevice, error: RefreshError(code: failure.code, message: failure.message)))]
        }
    }

    /// SE-3: the retry timer.
    mutating func fireDueTimers(_ state: PersistentState, now: Now) -> [RegistrationOutput] {
        guard let d = retryDeadline, d <= now.monotonic else { return [] }
        retryDeadline = nil
        return sendDevice(state)
    }
}

extension AgentMachine {
    /// SE-4, RF-4: sets the User ID, discards the previous user's flags at once, tells the
    /// server (`registerUser`, skipped for the same id within 24 h) and refreshes.
    public mutating func setUserId(_ newUserId: String, now: Now) -> [AgentAction] {
        var out = begin(now)
        let changed = newUserId != userId
        if changed {
            state.userId = newUserId
            refresh.identityChanged(keepBackoff: false)  // RF-4: an answer for the previous user is dropped; RF-11
            impressions.reset()  // IM-3: the new user's first exposure is never suppressed.
            out += stopServing(.discarded)  // ST-2
        }
        out += perform(registrations.setUser(newUserId, registered: state.registeredUser, now: now))
        // RF-4. With a request in flight this joins it (RF-9: never overlap); its answer,
        // for the previous user, is dropped and starts the request for the new one.
        if changed { out += requestFlags(.userChange) }
        return finish(out)
    }

    /// SE-3: registers for push with the simulated system prompt and token.
    public mutating func registerForPushNotifications(now: Now) -> (granted: Bool, pushToken: String?, actions: [AgentAction]) {
        let out = begin(now)
        let (granted, token, more) = registerForPush()
        return (granted, token, finish(out + more))
    }

    mutating func registerForPush() -> (granted: Bool, pushToken: String?, actions: [AgentAction]) {
        let (authorization, prompt, sent) = (notificationAuthorization, settings.device.permissionPromptAnswer, refresh.requestsSent)
        let (granted, token, outputs) = registrations.register(&state, authorization: authorization, prompt: prompt,
                                                               flagsRequestsSent: sent, now: now, &random)
        return (granted, token, perform(outputs))
    }

    /// SE-3: unregisters from push.
    public mutating func unregisterForPushNotifications(now: Now) -> [AgentAction] {
        let out = begin(now)
        registrations.unregister(&state)
        return finish(out + [.send(request(.unregisterDevice), .unregisterDevice)])
    }

    /// PR-1: the simulated notification authorization, as a client changed it.
    public mutating func setNotificationAuthorization(_ status: NotificationAuthorization, now: Now) -> [AgentAction] {
        let out = begin(now)
        state.notificationAuthorization = status
        return finish(out)
    }

    mutating func registerUserAnswered(_ id: String, _ outcome: HTTPOutcome) -> [AgentAction] {
        perform(registrations.userAnswered(id, PushwooshAPI.classify(outcome), &state, now: now))
    }

    mutating func registerDeviceAnswered(_ token: String, _ outcome: HTTPOutcome) -> [AgentAction] {
        let sent = refresh.requestsSent
        return perform(registrations.deviceAnswered(token, PushwooshAPI.classify(outcome), &state, flagsRequestsSent: sent, now: now))
    }

    mutating func registrationTimers() -> [AgentAction] {
        perform(registrations.fireDueTimers(state, now: now))
    }

    /// Turns the registration machine's outputs into actions, in order.
    private mutating func perform(_ outputs: [RegistrationOutput]) -> [AgentAction] {
        var out: [AgentAction] = []
        for output in outputs {
            switch output {
            case .registerDevice(let token, let retryCount):
                var fields = deviceFields
                fields["push_token"] = .string(token)
                fields["gateway"] = .string(settings.device.pushGateway)
                out.append(.send(request(.registerDevice, fields: fields, retryCount: retryCount), .registerDevice(token: token)))
            case .registerUser(let id):
                out.append(.send(request(.registerUser), .registerUser(userId: id)))
            case .refreshFlags:
                if session.appState == .active { out += automaticRefresh(.pushRegistration) }  // RF-3
            case .notify(let event):
                out.append(.notify(event))
            }
        }
        return out
    }
}
