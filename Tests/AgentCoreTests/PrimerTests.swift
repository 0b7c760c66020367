import AgentCore
import AgentTestSupport
import Foundation
import Testing

/// The minimal configuration of PR-5 plus `extra`.
private func primerParams(_ extra: [String: JSONValue] = [:]) -> [String: JSONValue] {
    var params: [String: JSONValue] = [
        "title": "Stay in the loop", "message": "Get notified about deals and order updates first",
        "acceptButton": "Enable notifications", "declineButton": "Not now",
    ]
    params.merge(extra) { _, new in new }
    return params
}

private func primer(_ extra: [String: JSONValue] = [:]) throws -> PrimerConfiguration {
    try PrimerConfiguration(params: primerParams(extra))
}

/// The error `params` are refused with, or nil when accepted.
private func refusal(_ params: [String: JSONValue]) -> PrimerConfigurationError? {
    do {
        _ = try PrimerConfiguration(params: params)
        return nil
    } catch {
        return error
    }
}

/// One row of the PR-1 table.
struct PrimerRow: Sendable, CustomTestStringConvertible {
    var authorization: NotificationAuthorization
    var answer: PrimerAnswer
    var fallbackToSettings: Bool
    var testDescription: String { "\(authorization) \(answer) fallback=\(fallbackToSettings)" }

    /// PR-1, PR-3: what the SDK does.
    var expected: PrimerOutcome {
        switch authorization {
        case .authorized, .provisional: .suppressed
        case .denied: !fallbackToSettings ? .suppressed : (answer == .accept ? .redirectedToSettings : .declined)
        case .notDetermined, .ephemeral: answer == .accept ? .accepted : .declined
        }
    }

    static let all: [PrimerRow] = NotificationAuthorization.allCases.flatMap { a in
        PrimerAnswer.allCases.flatMap { answer in [true, false].map { PrimerRow(authorization: a, answer: answer, fallbackToSettings: $0) } }
    }
}

/// docs/rules.md §7: the push primer, headless.
@Suite struct PrimerTests {
    // MARK: PR-1, PR-3: every status × answer × fallbackToSettings, through the agent

    @Test("PR-1, PR-3: every authorization status × answer × fallbackToSettings gives the SDK's outcome", arguments: PrimerRow.all)
    func stateAwareOutcome(_ row: PrimerRow) throws {
        let loop = VirtualLoop.serving([checkout])
        loop.agent.setNotificationAuthorization(row.authorization)
        let result = loop.agent.presentPushPrimer(try primer([
            "answer": .string(row.answer.rawValue), "fallbackToSettings": .bool(row.fallbackToSettings),
        ]))
        #expect(result.outcome == row.expected)
        #expect((result.presentation == nil) == (row.expected == .suppressed))  // PR-5: reported when shown
        #expect(result.json["outcome"] == .string(row.expected.rawValue))
        loop.run(for: 1)
        let registered = loop.transport.count("registerDevice")
        switch row.expected {
        case .accepted:
            // PR-1, PR-4: the system prompt (notDetermined → allow) or the ephemeral grant, then the token.
            #expect(registered == 1)
            #expect(loop.agent.notificationAuthorization == (row.authorization == .ephemeral ? .ephemeral : .authorized))
            #expect(loop.agent.status().pushRegistered)
        case .declined, .suppressed, .redirectedToSettings:
            // Nothing prompted, registered or changed; settings are the simulated user's business.
            #expect(registered == 0)
            #expect(loop.agent.notificationAuthorization == row.authorization)
            #expect(loop.agent.status().pushToken == nil)
        }
    }

    @Test("PR-1: suppressed silently, with the reason kept for logs")
    func suppressionReasons() throws {
        let loop = VirtualLoop.serving([checkout])
        loop.agent.setNotificationAuthorization(.provisional)
        #expect(loop.agent.presentPushPrimer(try primer(["answer": "accept"])).suppressedBecause == .alreadyAuthorized)
        loop.agent.setNotificationAuthorization(.denied)
        let off = loop.agent.presentPushPrimer(try primer(["answer": "accept", "fallbackToSettings": false]))
        #expect(off.suppressedBecause == .deniedWithoutFallback)
        #expect(off.json == ["outcome": "suppressed", "presentation": nil])
        let on = loop.agent.presentPushPrimer(try primer(["answer": "accept"]))  // fallbackToSettings defaults to on
        #expect(on.outcome == .redirectedToSettings)
        #expect(on.suppressedBecause == nil)
    }

    // MARK: Decision order (pure)

    @Test func decisionOrder() {
        let now = Date(timeIntervalSince1970: 1_800_000_000)
        let recent = now.addingTimeInterval(-10)
        func decide(_ a: NotificationAuthorization, fallback: Bool = true, minInterval: Seconds = 3600,
                    last: Date? = recent, inProgress: Bool = false) -> PushPrimer.Decision {
            PushPrimer.decide(authorization: a, fallbackToSettings: fallback, minInterval: minInterval,
                              lastShownAt: last, now: now, primerInProgress: inProgress)
        }
        // One at a time comes first, then authorization (PR-1), then the throttle (PR-2).
        #expect(decide(.notDetermined, inProgress: true) == .suppress(.primerInProgress))
        #expect(decide(.authorized, inProgress: true) == .suppress(.primerInProgress))
        #expect(decide(.authorized) == .suppress(.alreadyAuthorized))
        #expect(decide(.provisional) == .suppress(.alreadyAuthorized))
        #expect(decide(.denied, fallback: false) == .suppress(.deniedWithoutFallback))
        #expect(decide(.denied) == .suppress(.throttled))
        #expect(decide(.notDetermined) == .suppress(.throttled))
        #expect(decide(.ephemeral) == .suppress(.throttled))
        // Otherwise shown: not determined and ephemeral too.
        for a in [NotificationAuthorization.notDetermined, .ephemeral, .denied] {
            #expect(decide(a, last: nil) == .show)
            #expect(decide(a, minInterval: 0) == .show)  // PR-2: no minInterval, no throttling
        }
        // PR-2 boundary: shown again once minInterval seconds have passed.
        #expect(decide(.notDetermined, minInterval: 10) == .show)
        #expect(decide(.notDetermined, minInterval: 10.5) == .suppress(.throttled))
        // Interpretation: a last showing in the future (wall clock stepped back) does not throttle.
        #expect(decide(.notDetermined, last: now.addingTimeInterval(60)) == .show)
    }

    @Test("PR-3: accept gives accepted (redirectedToSettings when denied); decline gives declined")
    func outcomeTable() {
        #expect(PushPrimer.outcome(authorization: .notDetermined, answer: .accept) == .accepted)
        #expect(PushPrimer.outcome(authorization: .ephemeral, answer: .accept) == .accepted)
        #expect(PushPrimer.outcome(authorization: .denied, answer: .accept) == .redirectedToSettings)
        for a in NotificationAuthorization.allCases {
            #expect(PushPrimer.outcome(authorization: a, answer: .decline) == .declined)
        }
    }

    // MARK: PR-2: minInterval, virtual time, restarts

    @Test("PR-2: minInterval holds the primer back across restarts; without it there is no throttling")
    func minIntervalThrottlesAcrossRestarts() throws {
        let loop = VirtualLoop.serving([checkout])
        let weekly = try primer(["minInterval": 3600])
        #expect(loop.agent.presentPushPrimer(weekly).outcome == .declined)  // answer defaults to decline
        let shownAt = loop.clock.wall
        #expect(loop.store.committed?.primerLastShownAt == shownAt)  // persisted at presentation

        loop.run(for: 1000)
        let throttled = loop.agent.presentPushPrimer(weekly)
        #expect(throttled.outcome == .suppressed)
        #expect(throttled.suppressedBecause == .throttled)
        #expect(throttled.presentation == nil)
        #expect(loop.store.committed?.primerLastShownAt == shownAt)  // a suppressed primer is not a showing

        // The time of the last showing survives a restart; the throttle runs on the wall clock.
        loop.restart(after: 1000)
        #expect(loop.agent.presentPushPrimer(weekly).outcome == .suppressed)
        loop.run(for: 1599)
        #expect(loop.agent.presentPushPrimer(weekly).outcome == .suppressed)  // 3599 s after
        loop.run(for: 1)
        #expect(loop.agent.presentPushPrimer(weekly).outcome == .declined)  // 3600 s after
        #expect(loop.store.committed?.primerLastShownAt == loop.clock.wall)

        // Without minInterval there is no throttling, and nothing is stored.
        let stored = loop.clock.wall
        loop.run(for: 1)
        #expect(loop.agent.presentPushPrimer(try primer()).outcome == .declined)
        #expect(loop.agent.presentPushPrimer(try primer()).outcome == .declined)
        #expect(loop.store.committed?.primerLastShownAt == stored)
    }

    @Test("PR-2: the showing is stored before the answer, also when accepting leads to a denied prompt")
    func showingIsStoredBeforeTheAnswer() throws {
        let loop = VirtualLoop.serving([checkout], settings: settings { $0.device.permissionPromptAnswer = .deny })
        let result = loop.agent.presentPushPrimer(try primer(["minInterval": 60, "answer": "accept"]))
        #expect(result.outcome == .accepted)
        #expect(loop.store.committed?.primerLastShownAt == loop.clock.wall)
        loop.restart(after: 30)
        #expect(loop.agent.presentPushPrimer(try primer(["minInterval": 60])).suppressedBecause == .throttled)
    }

    // MARK: PR-3

    // Accepting requests the system prompt; its result (here: denied) comes through the
    // registration, and the next primer sends the user to the settings.
    @Test func acceptedThenPromptDenied() throws {
        let loop = VirtualLoop.serving([checkout], settings: settings { $0.device.permissionPromptAnswer = .deny })
        #expect(loop.agent.presentPushPrimer(try primer(["answer": "accept"])).outcome == .accepted)
        #expect(loop.agent.notificationAuthorization == .denied)
        loop.run(for: 1)
        #expect(loop.transport.count("registerDevice") == 0)
        #expect(loop.agent.presentPushPrimer(try primer(["answer": "accept"])).outcome == .redirectedToSettings)
        #expect(loop.agent.presentPushPrimer(try primer(["answer": "decline"])).outcome == .declined)
        // The simulated user turns notifications on in Settings: the primer is silent from now on.
        loop.agent.setNotificationAuthorization(.authorized)
        #expect(loop.agent.presentPushPrimer(try primer(["answer": "accept"])).outcome == .suppressed)
    }

    // MARK: PR-4: the ordinary registration chain, end to end in virtual time

    @Test("PR-4: accepting runs the ordinary registration chain, whose success triggers the RF-3 refresh")
    func acceptRunsTheRegistrationChain() throws {
        let loop = VirtualLoop.serving([checkout])
        loop.run(for: 60)
        let flagsBefore = loop.flagRequests.count
        #expect(flagsBefore == 1)  // the session start (RF-1)

        let result = loop.agent.presentPushPrimer(try primer(["answer": "accept"]))
        #expect(result.outcome == .accepted)  // at once, before the server answers
        #expect(loop.agent.status().pushRegistered == false)
        #expect(loop.agent.notificationAuthorization == .authorized)  // the prompt, answered "allow"

        loop.run(for: 1)
        let token = try #require(loop.agent.status().pushToken)
        #expect(token.range(of: "^[0-9a-f]{64}$", options: .regularExpression) != nil)
        let registrations = loop.transport.requests("registerDevice")
        #expect(registrations.count == 1)
        #expect(registrations[0].body["push_token"] == .string(token))
        #expect(registrations[0].body["notificationTypes"] == 7)
        #expect(loop.agent.status().pushRegistered)

        // RF-3: the previous flags request was sent before the registration: refresh after it.
        #expect(loop.flagRequests.count == flagsBefore + 1)
        let refresh = try #require(loop.flagRequests.last)
        #expect(refresh.sentAt >= registrations[0].sentAt)
        let order = loop.transport.requests.map(\.method).suffix(2)
        #expect(Array(order) == ["registerDevice", "getFeatureFlags"])
        #expect(loop.log.events.contains(.refreshSucceeded(trigger: .pushRegistration, flagCount: 1, partial: false)))

        // Authorized now: the primer is silent, and nothing else is sent.
        #expect(loop.agent.presentPushPrimer(try primer(["answer": "accept"])).outcome == .suppressed)
        loop.run(for: 1)
        #expect(loop.transport.count("registerDevice") == 1)
    }

    // MARK: One primer at a time

    @Test func onlyOnePrimerAtATime() throws {
        let loop = VirtualLoop.serving([checkout])
        loop.agent.setNotificationAuthorization(.ephemeral)  // stays showable while the chain runs
        loop.transport.script = { r in r.method == "registerDevice" ? .hold : .answer(ScriptedTransport.ok()) }
        let accept = try primer(["answer": "accept"])

        #expect(loop.agent.presentPushPrimer(accept).outcome == .accepted)
        #expect(loop.transport.heldCount("registerDevice") == 1)
        let second = loop.agent.presentPushPrimer(try primer(["answer": "decline"]))
        #expect(second.outcome == .suppressed)
        #expect(second.suppressedBecause == .primerInProgress)
        #expect(second.presentation == nil)

        // Answered: the next primer is shown (nothing changed within 24 h: no new registration).
        loop.transport.answerHeld("registerDevice", with: ScriptedTransport.ok())
        loop.settle()
        #expect(loop.agent.presentPushPrimer(accept).outcome == .accepted)
        #expect(loop.transport.count("registerDevice") == 1)
        #expect(loop.agent.presentPushPrimer(accept).outcome == .accepted)
    }

    // A failed registerDevice ends the primer's turn, although the agent retries it.
    @Test func failedRegistrationEndsThePrimersTurn() throws {
        let loop = VirtualLoop.serving([checkout])
        loop.agent.setNotificationAuthorization(.ephemeral)
        loop.transport.script = { r in r.method == "registerDevice" ? .hold : .answer(ScriptedTransport.ok()) }
        #expect(loop.agent.presentPushPrimer(try primer(["answer": "accept"])).outcome == .accepted)
        loop.transport.answerHeld("registerDevice", with: ScriptedTransport.http(503))
        loop.settle()
        #expect(loop.agent.presentPushPrimer(try primer()).outcome == .declined)
        loop.run(for: 1)  // the retry (SE-3), held again, is not the primer's
        #expect(loop.transport.heldCount("registerDevice") == 1)
        #expect(loop.agent.presentPushPrimer(try primer()).outcome == .declined)
    }

    // A registration a client started is not a primer being answered.
    @Test func clientRegistrationDoesNotBlockThePrimer() throws {
        let loop = VirtualLoop.serving([checkout])
        loop.agent.setNotificationAuthorization(.ephemeral)
        loop.transport.script = { r in r.method == "registerDevice" ? .hold : .answer(ScriptedTransport.ok()) }
        #expect(loop.agent.registerForPushNotifications().granted)
        #expect(loop.transport.heldCount("registerDevice") == 1)
        #expect(loop.agent.presentPushPrimer(try primer()).outcome == .declined)
    }

    // MARK: PR-5: validation

    @Test("PR-5: title, message and both button titles are required non-empty strings")
    func requiredTexts() {
        for name in ["title", "message", "acceptButton", "declineButton"] {
            var params = primerParams()
            params[name] = nil
            #expect(refusal(params) == PrimerConfigurationError(parameter: name, message: "missing required parameter '\(name)'"))
            params[name] = .null  // null counts as absent, as elsewhere in the socket API
            #expect(refusal(params)?.message == "missing required parameter '\(name)'")
            params[name] = ""
            #expect(refusal(params) == PrimerConfigurationError(parameter: name, message: "parameter '\(name)' must be a non-empty string"))
            params[name] = 5
            #expect(refusal(params)?.parameter == name)
        }
        #expect(refusal([:])?.parameter == "title")
        #expect(refusal(primerParams()) == nil)
    }

    @Test func invalidValuesNameTheParameter() {
        let colourForms = "a colour: #RRGGBB, #RRGGBBAA or one of: systemBackground, label, secondaryLabel, systemBlue, white, clear, separator"
        #expect(refusal(primerParams(["titleColor": "#12345"]))
            == PrimerConfigurationError(parameter: "titleColor", message: "parameter 'titleColor' must be \(colourForms)"))
        #expect(refusal(primerParams(["cornerRadius": -1]))
            == PrimerConfigurationError(parameter: "cornerRadius", message: "parameter 'cornerRadius' must be a number of 0 or more"))
        #expect(refusal(primerParams(["colour": "#FFFFFF"]))
            == PrimerConfigurationError(parameter: "colour", message: "unknown parameter 'colour'"))
        #expect(refusal(primerParams(["zeta": 1, "alpha": 1]))?.parameter == "alpha")  // stable: sorted
        #expect(refusal(["zeta": 1])?.parameter == "zeta")  // unknown before missing

        let bad: [(String, JSONValue)] = [
            ("style", "popup"), ("style", 1), ("position", "left"), ("answer", "maybe"), ("answer", true),
            ("fallbackToSettings", "yes"), ("minInterval", -1), ("minInterval", "60"),
            ("buttonCornerRadius", -0.5), ("cornerRadius", "24"),
            ("backgroundColor", "red"), ("backgroundColor", "#GGGGGG"), ("backgroundColor", "#1234567"),
            ("backgroundColor", "SystemBackground"), ("acceptButtonColor", "#12345"), ("acceptButtonTextColor", 0xFFFFFF),
            ("declineButtonColor", ""), ("declineButtonTextColor", "blue"), ("messageColor", "#FFF"),
            ("buttonBorderColor", "#"), ("backgroundGradient", "#FF0000"), ("backgroundGradient", ["#FF0000"]),
            ("backgroundGradient", ["#FF0000", "#12345"]), ("backgroundGradient", []),
            ("image", ""), ("image", 3), ("imageURL", "ftp://example.com/a.png"), ("imageURL", "not a url"),
            ("imageURL", "https://"),
        ]
        for (name, value) in bad {
            #expect(refusal(primerParams([name: value]))?.parameter == name, "\(name)=\(value)")
        }
        #expect(refusal(primerParams(["backgroundGradient": ["#FF0000", "#12345"]]))?.message.contains("item 1") == true)
    }

    @Test func acceptedValues() throws {
        let c = try primer([
            "style": "sheet", "position": "center", "fallbackToSettings": false, "minInterval": 604_800, "answer": "accept",
            "titleColor": "#1a2b3c", "messageColor": "#1A2B3C80", "cornerRadius": 0, "buttonCornerRadius": 7.5,
            "backgroundGradient": ["#FF0000", "systemBlue", "#00FF0080"], "imageURL": "https://cdn.example.com/hero.png",
            "acceptButtonColor": "label", "declineButtonTextColor": nil,
        ])
        #expect(c.style == .sheet && c.position == .center)
        #expect(c.fallbackToSettings == false && c.minInterval == 604_800 && c.answer == .accept)
        #expect(c.visuals.titleColor?.value == "#1A2B3C")  // hex kept in upper case
        #expect(c.visuals.messageColor?.value == "#1A2B3C80")
        #expect(c.visuals.cornerRadius == 0 && c.visuals.buttonCornerRadius == 7.5)
        #expect(c.visuals.backgroundGradient?.map(\.value) == ["#FF0000", "systemBlue", "#00FF0080"])
        #expect(c.visuals.declineButtonTextColor == nil)
        for name in PrimerColor.semanticNames { #expect(PrimerColor(name)?.value == name) }

        // Defaults of a minimal configuration.
        let minimal = try primer()
        #expect(minimal.style == .sheet && minimal.position == nil && minimal.resolvedPosition == .bottom)
        #expect(minimal.fallbackToSettings && minimal.minInterval == 0 && minimal.answer == .decline)
        #expect(minimal.visuals == PrimerVisuals())
    }

    // MARK: PR-5: resolution

    @Test("PR-5: a minimal configuration resolves to the sheet's defaults, at the bottom unless placed")
    func sheetDefaults() throws {
        let p = try primer().presentation.json
        #expect(p == [
            "style": "sheet", "position": "bottom",
            "title": "Stay in the loop", "message": "Get notified about deals and order updates first",
            "acceptButton": "Enable notifications", "declineButton": "Not now",
            "image": nil, "imageURL": nil,
            "backgroundColor": "systemBackground", "backgroundGradient": nil,
            "titleColor": "label", "messageColor": "secondaryLabel",
            "acceptButtonColor": "systemBlue", "acceptButtonTextColor": "white",
            "declineButtonColor": "clear", "declineButtonTextColor": "secondaryLabel",
            "cornerRadius": 24, "buttonCornerRadius": 14, "buttonBorderColor": "separator",
        ])
        for position in PrimerPosition.allCases {
            let placed = try primer(["position": .string(position.rawValue)]).presentation.json
            #expect(placed["position"] == .string(position.rawValue))
            #expect(placed["cornerRadius"] == 24)
        }
    }

    @Test("PR-5: the alert style ignores the position")
    func alertIgnoresPosition() throws {
        let alert = try primer(["style": "alert", "position": "top"]).presentation
        #expect(alert.position == nil)
        #expect(alert.json["position"] == .null)
        #expect(alert.json["style"] == "alert")
        // The system alert's own look: tinted text buttons, separators, radius 14.
        #expect(alert.acceptButtonColor == .clear && alert.acceptButtonTextColor == .systemBlue)
        #expect(alert.declineButtonTextColor == .systemBlue)
        #expect(alert.cornerRadius == 14 && alert.buttonCornerRadius == 0)
        #expect(alert.backgroundColor == .systemBackground && alert.titleColor == .label)
        // The caller's values are reported as given.
        let custom = try primer(["style": "alert", "acceptButtonTextColor": "#FF0000", "cornerRadius": 8]).presentation
        #expect(custom.acceptButtonTextColor.value == "#FF0000" && custom.cornerRadius == 8)
    }

    @Test("PR-5: a local image wins over an image URL")
    func imageBeatsImageURL() throws {
        let both = try primer(["image": "PrimerHero", "imageURL": "https://cdn.example.com/hero.png"]).presentation.json
        #expect(both["image"] == "PrimerHero")
        #expect(both["imageURL"] == .null)
        let remote = try primer(["imageURL": "https://cdn.example.com/hero.png"]).presentation.json
        #expect(remote["image"] == .null)
        #expect(remote["imageURL"] == "https://cdn.example.com/hero.png")
    }

    @Test("PR-5: a background gradient overrides the background colour")
    func gradientOverridesBackgroundColor() throws {
        let both = try primer(["backgroundColor": "#000000", "backgroundGradient": ["#FF0000", "#0000FF"]]).presentation.json
        #expect(both["backgroundGradient"] == ["#FF0000", "#0000FF"])
        #expect(both["backgroundColor"] == .null)
        let solid = try primer(["backgroundColor": "#000000"]).presentation.json
        #expect(solid["backgroundColor"] == "#000000")
        #expect(solid["backgroundGradient"] == .null)
    }

    @Test func overridesWinAndKeysAreStable() throws {
        let c = try primer([
            "style": "sheet", "position": "top", "titleColor": "white", "messageColor": "#FFFFFFCC",
            "acceptButtonColor": "#FFFFFF", "acceptButtonTextColor": "#000000", "declineButtonColor": "clear",
            "declineButtonTextColor": "white", "cornerRadius": 16, "buttonCornerRadius": 10, "buttonBorderColor": "clear",
        ])
        let p = c.presentation
        #expect(p.titleColor == .white && p.messageColor.value == "#FFFFFFCC")
        #expect(p.acceptButtonColor.value == "#FFFFFF" && p.acceptButtonTextColor.value == "#000000")
        #expect(p.declineButtonTextColor == .white && p.buttonBorderColor == .clear)
        #expect(p.cornerRadius == 16 && p.buttonCornerRadius == 10)
        let keys = Set(p.json.objectValue?.keys.map { $0 } ?? [])
        let minimalKeys = Set(try primer(["style": "alert"]).presentation.json.objectValue?.keys.map { $0 } ?? [])
        #expect(keys == minimalKeys)
        #expect(keys.count == 19)

        // The agent reports exactly this presentation when shown.
        let loop = VirtualLoop.serving([checkout])
        #expect(loop.agent.presentPushPrimer(c).presentation == p.json)
    }
}
