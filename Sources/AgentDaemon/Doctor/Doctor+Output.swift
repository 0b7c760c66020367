import AgentCore
import FoundationEssentials

extension Doctor.Report {
    /// The report for a person: one line per step, then the deviations and the verdict. Output
    /// is data (docs/real-pushwoosh.md): what the server sent is shown with its control
    /// characters escaped (`Visible`: an ESC sequence cannot redraw the terminal), and the token
    /// never appears.
    public func text(redacting secret: String?) -> String {
        let shown = { (text: String) in Visible.escape(Self.redact(text, secret)) }
        var out = "pushwoosh-agentd --doctor (\(shown(configFile)))\n"
        let width = max(16, (steps.map(\.name.count).max() ?? 0) + 2)
        for step in steps {
            let name = Self.pad(step.name, width)
            let mark = Self.pad(step.outcome.rawValue, 8)
            out += "\(name)\(mark)\(shown(step.detail))\(step.milliseconds.map { " (\($0) ms)" } ?? "")\n"
        }
        if !deviations.isEmpty {
            out += "deviations from the contract (JSON path: what was found):\n"
            for d in deviations { out += "  \(shown(d.path)): \(shown(d.problem))\(d.fatal ? "  [unusable]" : "")\n" }
        }
        out += usable ? "result: usable (\(totalMilliseconds) ms)\n" : "result: NOT usable (\(totalMilliseconds) ms)\n"
        return Self.redact(out, secret)
    }

    /// The report for a program (`--json`).
    public func json(redacting secret: String?) -> String {
        var flagList: [JSONValue] = []
        for f in flags {
            flagList.append(.object(["key": .string(f.key), "enabled": .bool(f.isEnabled), "rule_id": .string(f.ruleId),
                                     "properties": .object(f.properties)]))
        }
        let value: JSONValue = .object([
            "configFile": .string(configFile),
            "usable": .bool(usable),
            "totalMs": .number(Double(totalMilliseconds)),
            "steps": .array(steps.map { s in
                var o: [String: JSONValue] = ["name": .string(s.name), "outcome": .string(s.outcome.rawValue), "detail": .string(s.detail)]
                if let ms = s.milliseconds { o["ms"] = .number(Double(ms)) }
                return .object(o)
            }),
            "deviations": .array(deviations.map { .object(["path": .string($0.path), "problem": .string($0.problem), "fatal": .bool($0.fatal)]) }),
            "flags": .array(flagList),
            "partial": .bool(partial),
        ])
        // Every string is redacted before it is encoded: a token holding `"` or `\` is escaped in
        // the JSON text, where a search for it would miss it. Then DEL, C1 and the bidirectional
        // controls, which JSON leaves raw, are written as `\uXXXX` (the same JSON).
        let text = JSONWriter.string(Self.redacted(value, secret))
        return Visible.escape(Self.redact(Self.redact(text, secret), secret.map(Self.jsonEscaped))) + "\n"
    }

    /// `value` with the secret redacted in every string and key.
    static func redacted(_ value: JSONValue, _ secret: String?) -> JSONValue {
        guard let secret, !secret.isEmpty else { return value }
        switch value {
        case .string(let s): return .string(redact(s, secret))
        case .array(let a): return .array(a.map { redacted($0, secret) })
        case .object(let o):
            var out: [String: JSONValue] = [:]
            for (k, v) in o { out[redact(k, secret)] = redacted(v, secret) }
            return .object(out)
        default: return value
        }
    }

    /// How `secret` reads inside a JSON string.
    static func jsonEscaped(_ secret: String) -> String {
        String(JSONWriter.string(.string(secret)).dropFirst().dropLast())
    }

    static func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? text + " " : text + String(repeating: " ", count: width - text.count)
    }

    static func redact(_ text: String, _ secret: String?) -> String {
        guard let secret, secret.count >= 4, text.contains(secret) else { return text }
        return text.split(separator: secret, omittingEmptySubsequences: false).joined(separator: "<redacted>")
    }
}
