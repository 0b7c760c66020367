import FoundationEssentials

/// The device's registrations towards the server (SE-3, SE-4, A.2): the `registerDevice`
/// chain and its retries. The registrations themselves are in `PersistentState`.
struct Registrations: Sendable {
    /// SE-3: a `registerDevice` is in flight.
    var deviceInFlight = false
    /// SE-3: the retry number of the next `registerDevice` (0: the first send).
    var deviceAttempt = 0
    /// SE-3: when the failed `registerDevice` is sent again.
    var retryDeadline: Seconds?
    /// Counts registration chains (one per `registerForPushNotifications` that registers).
    var chain: UInt64 = 0
    /// RF-3: `RefreshMachine.requestsSent` when the last chain started.
    var flagsRequestsAtRegistration: UInt64 = 0
    /// PR-4: the `chain` the last accepted primer started.
    var primerChain: UInt64?

    /// Delays before `registerDevice` retries (A.2, SDK).
    static let retryDelays: [Seconds] = [1, 5, 10]
    /// `registerDevice` and `registerUser` are not repeated within this (A.2).
    static let reRegistrationInterval: Seconds = 24 * 3600
}

extension AgentMachine {
    // MARK: - User (SE-4)

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
        if let last = state.registeredUser, last.userId == newUserId,
           now.wall.timeIntervalSince(last.at) < Registrations.reRegistrationInterval {
            // Told the server within 24 h already.
        } else {
            out.append(.send(request(.registerUser), .registerUser(userId: newUserId)))
        }
        // RF-4. With a request in flight this joins it (RF-9: never overlap); its answer,
        // for the previous user, is dropped and starts the request for the new one.
        if changed { out += requestFlags(.userChange) }
        return finish(out)
    }

    mutating func registerUserAnswered(_ id: String, _ outcome: HTTPOutcome) -> [AgentAction] {
        let result = PushwooshAPI.classify(outcome)
        if case .success = result { state.registeredUser = PersistentState.RegisteredUser(userId: id, at: now.wall) }
        return [.notify(.callFinished(method: .registerUser, error: result.failure))]
    }

    // MARK: - Device (SE-3)

    /// SE-3: registers for push with the simulated system prompt and token.
    public mutating func registerForPushNotifications(now: Now) -> (granted: Bool, pushToken: String?, actions: [AgentAction]) {
        let out = begin(now)
        let (granted, token, more) = registerForPush()
        return (granted, token, finish(out + more))
    }

    mutating func registerForPush() -> (granted: Bool, pushToken: String?, actions: [AgentAction]) {
        var authorization = notificationAuthorization
        if authorization == .notDetermined {
            // The system prompt, answered by the simulated user.
            authorization = settings.device.permissionPromptAnswer == .allow ? .authorized : .denied
            state.notificationAuthorization = authorization
        }
        guard authorization != .denied else { return (false, nil, []) }
        let token = state.push?.token ?? Self.makePushToken(using: &random)
        let types = authorization.allowsNotifications ? 7 : 0
        if let existing = state.push, existing.token == token, existing.notificationTypes == types,
           let at = existing.registeredAt, now.wall.timeIntervalSince(at) < Registrations.reRegistrationInterval {
            return (true, token, [])  // nothing changed within 24 h
        }
        state.push = PersistentState.PushRegistration(token: token, notificationTypes: types, registeredAt: nil)
        registrations.deviceAttempt = 0
        registrations.retryDeadline = nil
        registrations.chain += 1
        registrations.flagsRequestsAtRegistration = refresh.requestsSent
        return (true, token, sendRegisterDevice())
    }

    /// SE-3: unregisters from push.
    public mutating func unregisterForPushNotifications(now: Now) -> [AgentAction] {
        let out = begin(now)
        state.push = nil
        registrations.retryDeadline = nil
        return finish(out + [.send(request(.unregisterDevice), .unregisterDevice)])
    }

    /// PR-1: the simulated notification authorization, as a client changed it.
    public mutating func setNotificationAuthorization(_ status: NotificationAuthorization, now: Now) -> [AgentAction] {
        let out = begin(now)
        state.notificationAuthorization = status
        return finish(out)
    }

    /// SE-3: one `registerDevice` at a time; a retry says which in `X-Retry-Count` (A.1).
    mutating func sendRegisterDevice() -> [AgentAction] {
        guard let push = state.push, !registrations.deviceInFlight else { return [] }
        registrations.deviceInFlight = true
        var fields = deviceFields
        fields["push_token"] = .string(push.token)
        fields["gateway"] = .string(settings.device.pushGateway)
        return [.send(request(.registerDevice, fields: fields, retryCount: registrations.deviceAttempt), .registerDevice(token: push.token))]
    }

    mutating func registerDeviceAnswered(_ token: String, _ outcome: HTTPOutcome) -> [AgentAction] {
        guard registrations.deviceInFlight else {
            preconditionFailure("a registerDevice answer with none in flight: \(registrations)")
        }
        registrations.deviceInFlight = false
        switch PushwooshAPI.classify(outcome) {
        case .success:
            guard state.push?.token == token else { return [] }
            state.push?.registeredAt = now.wall
            var out: [AgentAction] = [.notify(.callFinished(method: .registerDevice, error: nil))]
            // RF-3: refresh when the previous flags request was sent before the registration.
            if session.appState == .active, refresh.requestsSent == registrations.flagsRequestsAtRegistration {
                out += automaticRefresh(.pushRegistration)
            }
            return out
        case .failure(let failure):
            let delays = Registrations.retryDelays
            if failure.retryable, registrations.deviceAttempt < delays.count, state.push != nil {
                registrations.retryDeadline = now.monotonic + delays[registrations.deviceAttempt]
                registrations.deviceAttempt += 1
            }
            return [.notify(.callFinished(method: .registerDevice, error: RefreshError(code: failure.code, message: failure.message)))]
        }
    }
}
