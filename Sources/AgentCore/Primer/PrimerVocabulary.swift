import FoundationEssentials

// The push primer's vocabulary (docs/rules.md §7, PR-1..PR-5): styles, positions, answers,
// outcomes, colours and visuals. The configuration is in PrimerConfiguration.swift, the
// decision and the presentation in PushPrimer.swift.

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

/// The simulated user's tap (docs/socket-api.md B.2 `answer`).
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
/// default (docs/socket-api.md B.2). Hex colours are kept in upper case, so the resolved
/// presentation is stable whatever case the caller used.
public struct PrimerColor: Sendable, Hashable, CustomStringConvertible {
    public let value: String

    /// The semantic colour names the agent knows (docs/socket-api.md B.2), case-sensitive.
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
/// `parameter` in `data` (docs/socket-api.md B.2).
public struct PrimerConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The parameter's name as the caller spelled it (docs/socket-api.md B.2).
    public var parameter: String
    public var message: String

    public init(parameter: String, message: String) {
        self.parameter = parameter
        self.message = message
    }

    public var description: String { message }
}
