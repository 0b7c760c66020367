import AgentCore
import AgentWire

// The flag commands (docs/socket-api.md B.1): get, is-enabled, property, refresh, log-impression.

extension CommandDefinition {
    static let flagCommands: [CommandDefinition] = [
        CommandDefinition(
            name: "get", synopsis: "get KEY [--strict]", summary: "show a flag: enabled, rule, properties and where it came from",
            details: "Prints the flag's key, whether it is enabled, its rule, its properties and the\nprovenance (reason, source, age). \(fallbackNote) Method: get.",
            flags: ["--strict"],
            build: { s, d throws(UsageError) in d.command(.typed(.get(key: try ControlArguments.positionals(s, ["KEY"], d)[0]))) },
            print: { c, r throws(AnswerError) in
                guard case .typed(.get(let key)) = c.call else { mismatch(c) }
                return OutputFormatter.formatFlag(key: key, try FlagAnswer(json: r))
            },
            warning: { c, r in
                guard case .typed(.get(let key)) = c.call else { mismatch(c) }
                return OutputFormatter.readWarning(r, printed: "no flag printed") { $0 == .flagNotFound ? notFound(key) : "" }
            }),

        CommandDefinition(
            name: "is-enabled", synopsis: "is-enabled KEY [--default true|false] [--strict]", summary: "print true or false",
            details: "Prints whether the flag is enabled; --default (false unless given) is what the\nagent answers when it has no valid flag. \(fallbackNote) Method: isEnabled.",
            valued: ["--default"], flags: ["--strict"],
            build: { s, d throws(UsageError) in
                let key = try ControlArguments.positionals(s, ["KEY"], d)[0]
                let def = try s.values["--default"].map { (v) throws(UsageError) in try ControlArguments.boolean(v, "--default", d) } ?? false
                return d.command(.typed(.isEnabled(key: key, default: def)))
            },
            print: { _, r in r["enabled"]?.boolValue.map { $0 ? "true" : "false" } ?? JSONWriter.string(r) },
            warning: { c, r in
                guard case .typed(.isEnabled(let key, _)) = c.call else { mismatch(c) }
                return OutputFormatter.readWarning(r, printed: "printed the default") { $0 == .flagNotFound ? notFound(key) : "" }
            }),

        CommandDefinition(
            name: "property", synopsis: "property KEY PROP --type string|number|bool|jsonObject|jsonArray [--default V] [--strict]",
            summary: "print one property of a flag",
            details: "Prints the property's value, else the default. For scalar types --default\ndefaults to \"\", 0 or false; JSON types take no default (null when absent).\n--type also takes json or json-object for jsonObject, json-array for jsonArray.\n\(fallbackNote) Method: property.",
            valued: ["--type", "--default"], flags: ["--strict"],
            build: { s, d throws(UsageError) in try buildProperty(s, d) },
            print: { _, r in OutputFormatter.scalar(r["value"] ?? .null) },
            warning: { c, r in
                guard case .typed(.property(let key, let property, let type, _)) = c.call else { mismatch(c) }
                return OutputFormatter.readWarning(r, printed: !type.isScalar ? "printed null" : "printed the default") { code in
                    switch code {
                    case .flagNotFound: notFound(key)
                    // An agent that does not say which (no errorMessage).
                    case .typeMismatch: "flag \"\(key)\" has no \(type.rawValue) property \"\(property)\" (missing or of another type)"
                    case .providerNotReady: ""
                    }
                }
            }),

        CommandDefinition(
            name: "refresh", synopsis: "refresh [--strict]", summary: "fetch the flags now and wait for the outcome",
            details: """
                Prints "refresh: sent" and the flags that changed when the request went to the
                server, or "refresh: not sent (throttle window until T; the stored flags are in
                use)" when it was answered from the stored flags inside the 5-minute throttle
                window (T in device time). Exits 1 when the refresh failed; with --strict, 5
                when it was not sent. Method: refresh.
                """,
            flags: ["--strict"],
            build: { s, d throws(UsageError) in try ControlArguments.none(s, d, .typed(.refresh)) },
            print: { _, r throws(AnswerError) in OutputFormatter.refresh(try RefreshAnswer(json: r), changed: nil) },
            warning: { _, r in
                guard let answer = try? RefreshAnswer(json: r), answer.error == nil, !answer.sent else { return nil }
                return "warning: refresh not sent: " + (answer.throttledUntil.map {
                    "answered from the stored flags inside the throttle window (until \(SocketTime.string($0)))"
                } ?? "answered without a request")
            }),

        CommandDefinition(
            name: "log-impression", synopsis: "log-impression KEY", summary: "record that the user saw the flag's feature",
            details: "Method: logImpression.",
            build: { s, d throws(UsageError) in d.command(.typed(.logImpression(key: try ControlArguments.positionals(s, ["KEY"], d)[0]))) },
            print: { c, r in
                guard case .typed(.logImpression(let key)) = c.call else { mismatch(c) }
                return r["logged"]?.boolValue == true
                    ? "impression of \(Visible.escape(key)) logged"
                    : "no impression logged (no flag \(Visible.escape(key)), or already sent this session)"
            }),
    ]

    private static func notFound(_ key: String) -> String { FallbackMessage.flagNotFound(key) }

    private static func buildProperty(_ s: ControlArguments.Scanned, _ d: CommandDefinition) throws(UsageError) -> ControlCommand {
        let p = try ControlArguments.positionals(s, ["KEY", "PROP"], d)
        guard let typeName = s.values["--type"] else {
            throw UsageError("'\(d.name)' needs --type string|number|bool|jsonObject|jsonArray", command: d.name)
        }
        guard let type = PropertyType(spelling: typeName) else {
            throw UsageError("--type must be one of \(PropertyType.spellings), got \"\(typeName)\"", command: d.name)
        }
        let given = s.values["--default"]
        let def: JSONValue?
        switch type {
        case .string: def = .string(given ?? "")
        case .number: def = .number(try given.map { (v) throws(UsageError) in try ControlArguments.number(v, "--default", d) } ?? 0)
        case .bool: def = .bool(try given.map { (v) throws(UsageError) in try ControlArguments.boolean(v, "--default", d) } ?? false)
        case .jsonObject, .jsonArray:
            if given != nil { throw UsageError("--default is for string, number and bool properties only", command: d.name) }
            def = nil
        }
        return d.command(.typed(.property(key: p[0], property: p[1], type: type, default: def ?? .null)))
    }
}
