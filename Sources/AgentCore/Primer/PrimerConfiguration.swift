import FoundationEssentials

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

    /// Every parameter `presentPushPrimer` takes (docs/socket-api.md B.2); others are refused.
    public static let parameterNames: Set<String> = [
        "title", "message", "acceptButton", "declineButton", "style", "position", "fallbackToSettings",
        "minInterval", "answer", "image", "imageURL", "backgroundColor", "backgroundGradient", "titleColor",
        "messageColor", "acceptButtonColor", "acceptButtonTextColor", "declineButtonColor",
        "declineButtonTextColor", "cornerRadius", "buttonCornerRadius", "buttonBorderColor",
    ]

    /// Parses the JSON-RPC params object. As elsewhere in the socket API, `null` counts as
    /// absent. Errors name one parameter: unknown ones first (the first in sorted order),
    /// then the others in the order of docs/socket-api.md B.2.
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
