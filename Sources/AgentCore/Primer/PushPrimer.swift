import FoundationEssentials

// The push primer (SPEC §7, PR-1..PR-5), pure: the configuration and its validation, the
// decision to show or suppress, the outcome of the simulated user's answer, and the
// presentation resolved to the values the SDK would use. No clock, no state: `Agent`
// supplies the authorization status, the time and the last showing (Agent+Primer.swift).
//
// Source: seeds/004 ("iOS push primer", SDK 7.1.1+). Choices the document leaves open are
// marked **Interpretation**.

// MARK: - Vocabulary

/// PR-5: the system alert or the custom sheet.
///
/// **Interpretation:** the default is `sheet`. The document's style table marks
/// `.sheet + .bottom` "(default)" (the bottom sheet that slides up with a grabber and
/// full-width buttons), and its minimal example sets neither style nor position.
public enum PrimerStyle: String, Sendable, CaseIterable {
    /// The system `UIAlertController`; the position is ignored.
    case alert
    case sheet
}

/// PR-5: where a sheet appears. `bottom` (default) slides up with a grabber; `top` is a
/// compact banner that drops down like a notification; `center` scales and fades in.
public enum PrimerPosition: String, Sendable, CaseIterable {
    case bottom, top, center
}

/// The simulated user's tap (PROTOCOL B.2 `answer`).
///
/// **Interpretation:** the default is `decline`, the answer with no side effects: a
/// primer nobody accepts is a primer dismissed, and a CLI call that forgets `answer` never
/// prompts, registers or sends anything. Accepting is always said explicitly.
public enum PrimerAnswer: String, Sendable, CaseIterable {
    case accept, decline
}

/// PR-3.
public enum PrimerOutcome: String, Sendable, CaseIterable {
    /// Shown, the user accepted, the system prompt was requested.
    case accepted
    /// Shown, the user declined.
    case declined
    /// Not shown (see `PrimerSuppression`).
    case suppressed
    /// Denied state, the user was sent to the app's notification settings.
    case redirectedToSettings
}

/// Why a primer was not shown (PR-1, PR-2, one at a time).
public enum PrimerSuppression: String, Sendable, CaseIterable {
    /// Another primer is still being answered: its registration chain is in flight.
    case primerInProgress
    /// PR-1: authorized or provisional.
    case alreadyAuthorized
    /// PR-1: denied with `fallbackToSettings` off.
    case deniedWithoutFallback
    /// PR-2: shown less than `minInterval` seconds ago.
    case throttled
}

/// A colour: `#RRGGBB`, `#RRGGBBAA`, or the name of an iOS semantic colour used as a
/// default (PROTOCOL B.2). Hex colours are kept in upper case, so the resolved
/// presentation is stable whatever case the caller used.
public struct PrimerColor: Sendable, Hashable, CustomStringConvertible {
    public let value: String

    /// The semantic colour names the agent knows (PROTOCOL B.2), case-sensitive.
    public static let semanticNames: [String] = [
        "systemBackground", "label", "secondaryLabel", "systemBlue", "white", "clear", "separator",
    ]

    public static let systemBackground = PrimerColor(trusted: "systemBackground")
    public static let label = PrimerColor(trusted: "label")
    public static let secondaryLabel = PrimerColor(trusted: "secondaryLabel")
    public static let systemBlue = PrimerColor(trusted: "systemBlue")
    public static let white = PrimerColor(trusted: "white")
    public static let clear = PrimerColor(trusted: "clear")
    public static let separator = PrimerColor(trusted: "separator")

    /// Nil unless `text` is `#RRGGBB`, `#RRGGBBAA` or a semantic name.
    public init?(_ text: String) {
        if Self.semanticNames.contains(text) {
            value = text
            return
        }
        let digits = text.utf8.dropFirst()
        guard text.hasPrefix("#"), digits.count == 6 || digits.count == 8,
              digits.allSatisfy({ (48...57).contains($0) || (65...70).contains($0) || (97...102).contains($0) })
        else { return nil }
        value = text.uppercased()
    }

    private init(trusted: String) { value = trusted }

    public var description: String { value }
}

/// PR-5: the optional visual settings. Nil means "the native default".
public struct PrimerVisuals: Sendable, Equatable {
    /// A local image (headless: its name). Wins over `imageURL`.
    public var image: String?
    /// A remote image, `http` or `https`.
    public var imageURL: String?
    public var backgroundColor: PrimerColor?
    /// At least two colours; overrides `backgroundColor`.
    public var backgroundGradient: [PrimerColor]?
    public var titleColor: PrimerColor?
    public var messageColor: PrimerColor?
    /// Also tints the default icon.
    public var acceptButtonColor: PrimerColor?
    public var acceptButtonTextColor: PrimerColor?
    public var declineButtonColor: PrimerColor?
    public var declineButtonTextColor: PrimerColor?
    /// The card's corner radius, points, 0 or more.
    public var cornerRadius: Double?
    /// Both buttons' corner radius, points, 0 or more.
    public var buttonCornerRadius: Double?
    /// Both buttons' border colour.
    public var buttonBorderColor: PrimerColor?

    public init() {}
}

/// A configuration parameter that is missing or invalid. The daemon answers -32602 with
/// `parameter` in `data` (PROTOCOL B.2).
public struct PrimerConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The parameter's name as the caller spelled it (PROTOCOL B.2).
    public var parameter: String
    public var message: String

    public init(parameter: String, message: String) {
        self.parameter = parameter
        self.message = message
    }

    public var description: String { message }
}

// MARK: - Configuration

/// PR-5: what `presentPushPrimer` is asked to show, validated.
public struct PrimerConfiguration: Sendable, Equatable {
    public var title: String
    public var message: String
    public var acceptButton: String
    public var declineButton: String
    public var style: PrimerStyle = .sheet
    /// Nil: the style's default (`bottom` for a sheet). Ignored by `alert`.
    public var position: PrimerPosition?
    /// PR-1: in the denied state, show and send an accepting user to the settings. Default on.
    public var fallbackToSettings = true
    /// PR-2: seconds; 0 (the default) means no throttling.
    public var minInterval: Seconds = 0
    public var visuals = PrimerVisuals()
    public var answer: PrimerAnswer = .decline

    public init(title: String, message: String, acceptButton: String, declineButton: String) {
        self.title = title
        self.message = message
        self.acceptButton = acceptButton
        self.declineButton = declineButton
    }

    /// Every parameter `presentPushPrimer` takes (PROTOCOL B.2); others are refused.
    public static let parameterNames: Set<String> = [
        "title", "message", "acceptButton", "declineButton", "style", "position", "fallbackToSettings",
        "minInterval", "answer", "image", "imageURL", "backgroundColor", "backgroundGradient", "titleColor",
        "messageColor", "acceptButtonColor", "acceptButtonTextColor", "declineButtonColor",
        "declineButtonTextColor", "cornerRadius", "buttonCornerRadius", "buttonBorderColor",
    ]

    /// Parses the JSON-RPC params object. As elsewhere in the socket API, `null` counts as
    /// absent. Errors name one parameter: unknown ones first (the first in sorted order),
    /// then the others in the order of PROTOCOL B.2.
    public init(params: [String: JSONValue]) throws(PrimerConfigurationError) {
        if let unknown = params.keys.filter({ !Self.parameterNames.contains($0) }).sorted().first {
            throw PrimerConfigurationError(parameter: unknown, message: "unknown parameter '\(unknown)'")
        }
        let p = Reader(values: params)
        self.init(title: try p.text("title"), message: try p.text("message"),
                  acceptButton: try p.text("acceptButton"), declineButton: try p.text("declineButton"))
        style = try p.enumeration("style") ?? .sheet
        position = try p.enumeration("position")
        fallbackToSettings = try p.bool("fallbackToSettings") ?? true
        minInterval = try p.nonNegative("minInterval") ?? 0
        answer = try p.enumeration("answer") ?? .decline
        var v = PrimerVisuals()
        v.image = try p.optionalText("image")
        v.imageURL = try p.url("imageURL")
        v.backgroundColor = try p.color("backgroundColor")
        v.backgroundGradient = try p.gradient("backgroundGradient")
        v.titleColor = try p.color("titleColor")
        v.messageColor = try p.color("messageColor")
        v.acceptButtonColor = try p.color("acceptButtonColor")
        v.acceptButtonTextColor = try p.color("acceptButtonTextColor")
        v.declineButtonColor = try p.color("declineButtonColor")
        v.declineButtonTextColor = try p.color("declineButtonTextColor")
        v.cornerRadius = try p.nonNegative("cornerRadius")
        v.buttonCornerRadius = try p.nonNegative("buttonCornerRadius")
        v.buttonBorderColor = try p.color("buttonBorderColor")
        visuals = v
    }

    /// The position used: the given one for a sheet (default `bottom`); none for an alert.
    public var resolvedPosition: PrimerPosition? {
        switch style {
        case .alert: nil
        case .sheet: position ?? .bottom
        }
    }

    /// PR-5: every visual setting resolved to the value used.
    public var presentation: PrimerPresentation { PrimerPresentation(resolving: self) }

    /// Typed reads of the params object with -32602-style messages.
    private struct Reader {
        var values: [String: JSONValue]

        func present(_ key: String) -> JSONValue? {
            guard let v = values[key], !v.isNull else { return nil }
            return v
        }

        func invalid(_ key: String, _ expected: String) -> PrimerConfigurationError {
            PrimerConfigurationError(parameter: key, message: "parameter '\(key)' must be \(expected)")
        }

        func text(_ key: String) throws(PrimerConfigurationError) -> String {
            guard let s = try optionalText(key) else {
                throw PrimerConfigurationError(parameter: key, message: "missing required parameter '\(key)'")
            }
            return s
        }

        func optionalText(_ key: String) throws(PrimerConfigurationError) -> String? {
            guard let v = present(key) else { return nil }
            guard let s = v.stringValue, !s.isEmpty else { throw invalid(key, "a non-empty string") }
            return s
        }

        func bool(_ key: String) throws(PrimerConfigurationError) -> Bool? {
            guard let v = present(key) else { return nil }
            guard let b = v.boolValue else { throw invalid(key, "a boolean") }
            return b
        }

        func nonNegative(_ key: String) throws(PrimerConfigurationError) -> Double? {
            guard let v = present(key) else { return nil }
            guard let n = v.numberValue, n.isFinite, n >= 0 else { throw invalid(key, "a number of 0 or more") }
            return n
        }

        func enumeration<E: RawRepresentable & CaseIterable>(_ key: String) throws(PrimerConfigurationError) -> E?
        where E.RawValue == String {
            guard let v = present(key) else { return nil }
            guard let s = v.stringValue, let e = E(rawValue: s) else {
                throw invalid(key, "one of: " + E.allCases.map(\.rawValue).joined(separator: ", "))
            }
            return e
        }

        static let colorForms = "a colour: #RRGGBB, #RRGGBBAA or one of: " + PrimerColor.semanticNames.joined(separator: ", ")

        func color(_ key: String) throws(PrimerConfigurationError) -> PrimerColor? {
            guard let v = present(key) else { return nil }
            guard let s = v.stringValue, let c = PrimerColor(s) else { throw invalid(key, Self.colorForms) }
            return c
        }

        /// **Interpretation:** a gradient has at least two colours (the document: "an array
        /// of colours rendered as a soft multi-colour gradient").
        func gradient(_ key: String) throws(PrimerConfigurationError) -> [PrimerColor]? {
            guard let v = present(key) else { return nil }
            guard let items = v.arrayValue, items.count >= 2 else { throw invalid(key, "an array of 2 or more colours") }
            var colors: [PrimerColor] = []
            for (index, item) in items.enumerated() {
                guard let s = item.stringValue, let c = PrimerColor(s) else {
                    throw PrimerConfigurationError(
                        parameter: key, message: "parameter '\(key)' item \(index) must be \(Self.colorForms)")
                }
                colors.append(c)
            }
            return colors
        }

        /// A remote image: an absolute `http` or `https` URL with a host.
        func url(_ key: String) throws(PrimerConfigurationError) -> String? {
            guard let s = try optionalText(key) else { return nil }
            guard let u = URL(string: s), let scheme = u.scheme?.lowercased(), scheme == "http" || scheme == "https",
                  let host = u.host, !host.isEmpty
            else { throw invalid(key, "an http or https URL") }
            return s
        }
    }
}

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
/// text, corner radius 24, button corner radius 14, button border `separator`; PROTOCOL
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

    /// The `presentation` object of PROTOCOL B.2: every key always present (null when not
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

/// What `presentPushPrimer` returns (PROTOCOL B.2).
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
