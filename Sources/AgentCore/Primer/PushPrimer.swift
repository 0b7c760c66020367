import FoundationEssentials

// The push primer (docs/rules.md §7, PR-1..PR-5), pure: the decision to show or suppress, the
// outcome of the simulated user's answer, and the presentation resolved to the values the
// SDK would use. No clock, no state: the machine supplies the authorization status, the
// time and the last showing (AgentMachine+Primer.swift). The vocabulary is in
// PrimerVocabulary.swift, the configuration and its validation in PrimerConfiguration.swift.
//
// Source: seeds/004 ("iOS push primer", SDK 7.1.1+). Choices the document leaves open are
// marked **Interpretation**.

// MARK: - Decision and outcome

/// PR-1..PR-3 as pure functions.
public enum PushPrimer {
    /// What to do with a `present` call.
    public enum Decision: Sendable, Equatable {
        case show
        case suppress(PrimerSuppression)
    }

    /// The SDK's order: a primer already being answered; authorized or provisional (PR-1);
    /// denied with the fallback off (PR-1); `minInterval` not yet elapsed since the last
    /// showing, on the wall clock (PR-2); otherwise shown (not determined, ephemeral, and
    /// denied with the fallback on).
    ///
    /// **Interpretation:** a last showing in the future (the wall clock was stepped back)
    /// does not throttle: how long ago it was cannot be known, and suppressing until the
    /// clock catches up could hide the primer for years. Showing stores the time afresh.
    public static func decide(
        authorization: NotificationAuthorization, fallbackToSettings: Bool, minInterval: Seconds,
        lastShownAt: Date?, now: Date, primerInProgress: Bool = false
    ) -> Decision {
        if primerInProgress { return .suppress(.primerInProgress) }
        switch authorization {
        case .authorized, .provisional:
            return .suppress(.alreadyAuthorized)
        case .denied where !fallbackToSettings:
            return .suppress(.deniedWithoutFallback)
        case .denied, .notDetermined, .ephemeral:
            break
        }
        if minInterval > 0, let last = lastShownAt {
            let elapsed = now.timeIntervalSince(last)
            if elapsed >= 0, elapsed < minInterval { return .suppress(.throttled) }
        }
        return .show
    }

    /// PR-1, PR-3: the outcome of a shown primer. Accepting in the denied state sends the
    /// user to the settings (only reachable with the fallback on: otherwise it is
    /// suppressed); accepting otherwise requests the system prompt.
    public static func outcome(authorization: NotificationAuthorization, answer: PrimerAnswer) -> PrimerOutcome {
        switch (answer, authorization) {
        case (.decline, _): .declined
        case (.accept, .denied): .redirectedToSettings
        case (.accept, .notDetermined), (.accept, .ephemeral), (.accept, .authorized), (.accept, .provisional): .accepted
        }
    }
}

// MARK: - Presentation

/// PR-5, headless: the primer as it would be drawn, every setting resolved to the value
/// used. The caller's value wins; otherwise the native default of the style.
///
/// **Interpretation** (defaults). The document's customization example lists the native
/// look: background `systemBackground`, title `label`, message `secondaryLabel`, accept
/// button `systemBlue` with `white` text, decline button `clear` with `secondaryLabel`
/// text, corner radius 24, button corner radius 14, button border `separator`; docs/socket-api.md
/// B.2 names exactly these colours as the defaults. They are the sheet's defaults, for
/// every position (the document gives no per-position values). The `alert` is the system
/// `UIAlertController`, whose native look differs: text buttons in `systemBlue` on a
/// `clear` background, separated by `separator` lines, square buttons (radius 0) in a
/// card of radius 14. The caller's visuals are still reported as given for an alert: the
/// agent does not second-guess which of them the system alert honours.
///
/// A local image wins over an image URL (the URL resolves to null); a gradient overrides
/// the background colour (the colour resolves to null: not used). Without an image both
/// are null (the SDK then shows its default icon, tinted with the accept colour).
public struct PrimerPresentation: Sendable, Equatable {
    public var style: PrimerStyle
    /// Nil for an alert (position ignored).
    public var position: PrimerPosition?
    public var title: String
    public var message: String
    public var acceptButton: String
    public var declineButton: String
    public var image: String?
    public var imageURL: String?
    public var backgroundColor: PrimerColor?
    public var backgroundGradient: [PrimerColor]?
    public var titleColor: PrimerColor
    public var messageColor: PrimerColor
    public var acceptButtonColor: PrimerColor
    public var acceptButtonTextColor: PrimerColor
    public var declineButtonColor: PrimerColor
    public var declineButtonTextColor: PrimerColor
    public var cornerRadius: Double
    public var buttonCornerRadius: Double
    public var buttonBorderColor: PrimerColor

    /// The native defaults of one style (see the type's documentation).
    public struct Defaults: Sendable, Equatable {
        public var backgroundColor: PrimerColor = .systemBackground
        public var titleColor: PrimerColor = .label
        public var messageColor: PrimerColor = .secondaryLabel
        public var acceptButtonColor: PrimerColor = .systemBlue
        public var acceptButtonTextColor: PrimerColor = .white
        public var declineButtonColor: PrimerColor = .clear
        public var declineButtonTextColor: PrimerColor = .secondaryLabel
        public var cornerRadius: Double = 24
        public var buttonCornerRadius: Double = 14
        public var buttonBorderColor: PrimerColor = .separator

        public static func native(_ style: PrimerStyle) -> Defaults {
            var d = Defaults()
            switch style {
            case .sheet:
                break
            case .alert:
                d.acceptButtonColor = .clear
                d.acceptButtonTextColor = .systemBlue
                d.declineButtonTextColor = .systemBlue
                d.cornerRadius = 14
                d.buttonCornerRadius = 0
            }
            return d
        }
    }

    public init(resolving c: PrimerConfiguration) {
        let d = Defaults.native(c.style)
        let v = c.visuals
        style = c.style
        position = c.resolvedPosition
        title = c.title
        message = c.message
        acceptButton = c.acceptButton
        declineButton = c.declineButton
        image = v.image
        imageURL = v.image == nil ? v.imageURL : nil
        backgroundGradient = v.backgroundGradient
        backgroundColor = v.backgroundGradient == nil ? (v.backgroundColor ?? d.backgroundColor) : nil
        titleColor = v.titleColor ?? d.titleColor
        messageColor = v.messageColor ?? d.messageColor
        acceptButtonColor = v.acceptButtonColor ?? d.acceptButtonColor
        acceptButtonTextColor = v.acceptButtonTextColor ?? d.acceptButtonTextColor
        declineButtonColor = v.declineButtonColor ?? d.declineButtonColor
        declineButtonTextColor = v.declineButtonTextColor ?? d.declineButtonTextColor
        cornerRadius = v.cornerRadius ?? d.cornerRadius
        buttonCornerRadius = v.buttonCornerRadius ?? d.buttonCornerRadius
        buttonBorderColor = v.buttonBorderColor ?? d.buttonBorderColor
    }

    /// The `presentation` object of docs/socket-api.md B.2: every key always present (null when not
    /// used), so clients can rely on the shape.
    public var json: JSONValue {
        func color(_ c: PrimerColor?) -> JSONValue { c.map { .string($0.value) } ?? .null }
        func text(_ s: String?) -> JSONValue { s.map { .string($0) } ?? .null }
        return .object([
            "style": .string(style.rawValue),
            "position": text(position?.rawValue),
            "title": .string(title),
            "message": .string(message),
            "acceptButton": .string(acceptButton),
            "declineButton": .string(declineButton),
            "image": text(image),
            "imageURL": text(imageURL),
            "backgroundColor": color(backgroundColor),
            "backgroundGradient": backgroundGradient.map { .array($0.map { .string($0.value) }) } ?? .null,
            "titleColor": color(titleColor),
            "messageColor": color(messageColor),
            "acceptButtonColor": color(acceptButtonColor),
            "acceptButtonTextColor": color(acceptButtonTextColor),
            "declineButtonColor": color(declineButtonColor),
            "declineButtonTextColor": color(declineButtonTextColor),
            "cornerRadius": .number(cornerRadius),
            "buttonCornerRadius": .number(buttonCornerRadius),
            "buttonBorderColor": color(buttonBorderColor),
        ])
    }
}

/// What `presentPushPrimer` returns (docs/socket-api.md B.2).
public struct PrimerResult: Sendable, Equatable {
    public var outcome: PrimerOutcome
    /// The resolved presentation when shown; nil when suppressed.
    public var presentation: JSONValue?
    /// Why it was suppressed; nil when shown. Not part of the B.2 result (logs, agentctl).
    public var suppressedBecause: PrimerSuppression?

    public init(outcome: PrimerOutcome, presentation: JSONValue?, suppressedBecause: PrimerSuppression? = nil) {
        self.outcome = outcome
        self.presentation = presentation
        self.suppressedBecause = suppressedBecause
    }

    /// The B.2 result: `{"outcome": …, "presentation": {…} | null}`.
    public var json: JSONValue {
        .object(["outcome": .string(outcome.rawValue), "presentation": presentation ?? .null])
    }
}
