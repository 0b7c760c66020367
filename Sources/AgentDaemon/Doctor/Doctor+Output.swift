import AgentCore
import FoundationEssentials

extension Doctor.Report {
    /// The report for a person: one line per step, then the deviations and the verdict.
    public func text(redacting secret: String?) -> String {
        var out = "pushwoosh-agentd --doctor (\(configFile))\n"
        let width = max(16, (steps.map(\.name.count).max() ?? 0) + 2)
        for step in steps {
            let name = Self.pad(step.name, width)
            let mark = Self.pad(step.outcome.rawValue, 8)
            out += "\(name)\(mark)\(step.detail)\(step.milliseconds.map { " (\($0) ms)" } ?? "")\n"
        }
        if !deviations.isEmpty {
            out += "deviations from the contract (JSON path: what was found):\n"
            for d in deviations { out += "  \(d.path): \(d.problem)\(d.fatal ? "  [unusable]" : "")\n" }
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
        return Self.redact(JSONWriter.string(value), secret) + "\n"
    }

    static func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? text + " " : text + String(repeating: " ", count: width - text.count)
    }

    static func redact(_ text: String, _ secret: String?) -> String {
        guard let secret, secret.count >= 4, text.contains(secret) else { return text }
        return text.split(separator: secret, omittingEmptySubsequences: false).joined(separator: "<redacted>")
    }
}
