import FoundationEssentials

extension AgentMachine {
    /// PR-1..PR-5: presents the push primer to the simulated user and acts on `answer`.
    ///
    /// Reads the notification authorization, decides (`PushPrimer.decide`), and when shown:
    /// stores the time of this showing if `minInterval` > 0 (PR-2: saved with the event,
    /// before its answer is processed by anyone, so it survives restarts), then processes the
    /// answer (PR-3). Accepting outside the denied state answers `accepted` at once and runs
    /// the ordinary registration chain (PR-4): the system prompt answered per
    /// `PermissionPromptAnswer`, the token, `registerDevice`, and the flags refresh of RF-3
    /// when that succeeds. Accepting in the denied state only reports `redirectedToSettings`:
    /// the simulated user changes the setting later, with `setNotificationAuthorization`.
    public mutating func presentPushPrimer(_ configuration: PrimerConfiguration, now: Now) -> (result: PrimerResult, actions: [AgentAction]) {
        var out = begin(now)
        let authorization = notificationAuthorization
        let decision = PushPrimer.decide(
            authorization: authorization, fallbackToSettings: configuration.fallbackToSettings,
            minInterval: configuration.minInterval, lastShownAt: state.primerLastShownAt, now: now.wall,
            primerInProgress: primerBeingAnswered)
        if case .suppress(let reason) = decision {
            return (PrimerResult(outcome: .suppressed, presentation: nil, suppressedBecause: reason), finish(out))
        }
        if configuration.minInterval > 0 {
            state.primerLastShownAt = now.wall  // PR-2: at presentation, before the answer.
        }
        let outcome = PushPrimer.outcome(authorization: authorization, answer: configuration.answer)
        if outcome == .accepted {
            out += registerForPush().actions  // PR-4: the ordinary chain, not a copy of it.
            registrations.primerChain = registrations.deviceInFlight ? registrations.chain : nil
        }
        return (PrimerResult(outcome: outcome, presentation: configuration.presentation.json), finish(out))
    }

    /// "Only one primer at a time." Headless, the tap is answered within the call, so a
    /// primer is *being answered* while the registration chain its acceptance started is in
    /// flight: from the system prompt until the first `registerDevice` of that chain
    /// finishes, successfully or not. A retry after a failure, or a chain a client started
    /// with `registerForPushNotifications`, is not the primer's.
    var primerBeingAnswered: Bool {
        guard let chain = registrations.primerChain else { return false }
        return chain == registrations.chain && registrations.deviceInFlight && registrations.deviceAttempt == 0
    }
}
