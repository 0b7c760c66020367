import FoundationEssentials

extension PrimerConfiguration {
    /// The JSON-RPC params object `init(params:)` reads back to this configuration: the
    /// required texts, then every setting that is not the default.
    public var params: [String: JSONValue] {
        var p: [String: JSONValue] = [
            "title": .string(title), "message": .string(message),
            "acceptButton": .string(acceptButton), "declineButton": .string(declineButton),
        ]
        if style != .sheet { p["style"] = .string(style.rawValue) }
        if let position { p["position"] = .string(position.rawValue) }
        if !fallbackToSettings { p["fallbackToSettings"] = false }
        if minInterval != 0 { p["minInterval"] = .number(minInterval) }
        if answer != .decline { p["answer"] = .string(answer.rawValue) }
        let v = visuals
        if let image = v.image { p["image"] = .string(image) }
        if let url = v.imageURL { p["imageURL"] = .string(url) }
        if let colors = v.backgroundGradient { p["backgroundGradient"] = .array(colors.map { .string($0.value) }) }
        let colors: [(String, PrimerColor?)] = [
            ("backgroundColor", v.backgroundColor), ("titleColor", v.titleColor), ("messageColor", v.messageColor),
            ("acceptButtonColor", v.acceptButtonColor), ("acceptButtonTextColor", v.acceptButtonTextColor),
            ("declineButtonColor", v.declineButtonColor), ("declineButtonTextColor", v.declineButtonTextColor),
            ("buttonBorderColor", v.buttonBorderColor),
        ]
        for case (let name, let color?) in colors { p[name] = .string(color.value) }
        if let r = v.cornerRadius { p["cornerRadius"] = .number(r) }
        if let r = v.buttonCornerRadius { p["buttonCornerRadius"] = .number(r) }
        return p
    }
}
