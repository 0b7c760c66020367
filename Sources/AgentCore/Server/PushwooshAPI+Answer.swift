import AgentJSON
import FoundationEssentials

// The one walk of an answer from the device API against the contract (docs/device-api.md A.1,
// A.3): `classify` and `parseFlags` refuse what it finds fatal, in the agent's words, and
// `pushwoosh-agentd --doctor` lists everything it finds.

extension PushwooshAPI {
    /// Walks the envelope (A.1) as `walkFlagsResponse` walks a response: the body is JSON, an
    /// object, with `status_code` 200 (then `status_message` a string, no other members, with
    /// `lenient`). The envelope object, when the body is one and the walk was not stopped; the
    /// caller knows from its findings whether the agent may use it.
    static func walkEnvelope(_ body: some ContiguousBytes, lenient: Bool,
                             report: (AnswerFinding) -> Bool) -> [String: JSONValue]? {
        let envelope: JSONValue
        var size = 0
        do {
            envelope = try body.withUnsafeBytes { bytes in
                size = bytes.count
                return try JSONReader.parse(bytes)
            }
        } catch {
            _ = report(AnswerFinding(path: AnswerFinding.body, kind: .notJSON("\(error)", bytes: size)))
            return nil
        }
        guard let top = envelope.objectValue else {
            _ = report(AnswerFinding(path: AnswerFinding.body, kind: .wrongKind(expected: "an object", found: envelope)))
            return nil
        }
        switch top["status_code"] {
        case .number(let n)? where n == 200: break
        case .number(let n)?:
            // Any number may arrive here (1e20 included): shown without converting to Int.
            let shown = Int(exactly: n).map(String.init) ?? String(n)
            let finding = AnswerFinding(path: "status_code", kind: .wrongValue(shown: shown, expected: "200"),
                                        detail: top["status_message"]?.stringValue ?? "")
            guard report(finding) else { return nil }
        case let other:
            let kind: AnswerFinding.Kind = other.map { .wrongKind(expected: "a number", found: $0) } ?? .missing
            guard report(AnswerFinding(path: "status_code", kind: kind)) else { return nil }
        }
        guard lenient else { return top }
        if let message = top["status_message"], message.stringValue == nil {
            guard report(AnswerFinding(path: "status_message", kind: .wrongKind(expected: "a string", found: message), fatal: false)) else {
                return nil
            }
        }
        for key in top.keys.sorted() where !["status_code", "status_message", "response", "base_url"].contains(key) {
            guard report(AnswerFinding(path: key, kind: .notInContract, fatal: false)) else { return nil }
        }
        return top
    }

    /// A place where an answer departs from the contract (the envelope, A.1; a `getFeatureFlags`
    /// `response`, A.3), as the one walk of it finds it (`walkEnvelope`, `walkFlagsResponse`): the
    /// agent's refusal (RF-7) and `--doctor`'s deviations are two renderings of the same findings.
    struct AnswerFinding {
        enum Kind {
            case missing
            case wrongKind(expected: String, found: JSONValue)
            /// The body is not JSON: the reader's error, and the body's size.
            case notJSON(String, bytes: Int)
            /// A value other than the one the contract allows (`status_code` 210).
            case wrongValue(shown: String, expected: String)
            case notInContract
            /// A flag key seen before, at `previous` (the last one wins).
            case repeatedKey(String, previous: Int)
        }

        var path: String
        var kind: Kind
        /// The agent cannot use the answer.
        var fatal = true
        /// How the agent reads a lenient finding, as the doctor says it (` (served as "default")`).
        var handling = ""
        /// What the agent's refusal adds (`flag k`).
        var detail: String?

        /// The body as a whole, in a path.
        static let body = "(body)"

        /// The agent's words; a null counts as missing.
        var agentText: String {
            switch kind {
            case .notJSON(let error, let bytes): "answer is not JSON: \(error) (\(bytes) bytes)"
            case .wrongKind(_, let found) where path == Self.body: "answer is JSON but not an object: found \(PushwooshAPI.found(found))"
            case .missing, .wrongKind(_, .null): "\(path) is missing" + (detail.map { " (\($0))" } ?? "")
            case .wrongKind(let expected, let found): "\(path) is not \(expected): found \(PushwooshAPI.found(found))"
            case .wrongValue(let shown, _): "\(path) \(shown): \(detail ?? "")"
            case .notInContract, .repeatedKey: deviation.problem
            }
        }

        /// The doctor's words.
        var deviation: Deviation {
            let problem = switch kind {
            case .missing: "missing"
            case .wrongKind(let expected, let found): "\(found.kindName), expected \(expected)"
            case .notJSON: "not JSON"
            case .wrongValue(let shown, let expected): "\(shown), expected \(expected)"
            case .notInContract: "not in the contract (ignored)"
            case .repeatedKey(let key, let previous): "\"\(key)\" again (response.flags[\(previous)])"
            }
            return Deviation(path, problem + handling, fatal: fatal)
        }
    }

    /// Walks A.3's `response` in document order, handing each finding to `report`, which says
    /// whether to go on. Without `lenient` only the fatal findings are looked for (the agent's
    /// parse, every refresh); with it also what the agent reads leniently: members not in the
    /// contract, a missing `rule_id`, a repeated key. The flags, when nothing fatal was found.
    static func walkFlagsResponse(_ response: JSONValue?, lenient: Bool,
                                  report: (AnswerFinding) -> Bool) -> FlagsResponse? {
        var fatal = false
        func found(_ finding: AnswerFinding) -> Bool {
            fatal = fatal || finding.fatal
            return report(finding)
        }
        guard let response else { _ = found(AnswerFinding(path: "response", kind: .missing, detail: "absent or null")); return nil }
        guard let object = response.objectValue else {
            _ = found(AnswerFinding(path: "response", kind: .wrongKind(expected: "an object", found: response), detail: "absent or null"))
            return nil
        }
        var partial = false
        switch object["partial"] {
        case nil, .null?: break
        case .bool(let b)?: partial = b
        case let other?:
            guard found(AnswerFinding(path: "response.partial", kind: .wrongKind(expected: "a boolean", found: other))) else { return nil }
        }
        if lenient {
            for key in object.keys.sorted() where !["flags", "partial", "base_url"].contains(key) {
                guard found(AnswerFinding(path: "response.\(key)", kind: .notInContract, fatal: false)) else { return nil }
            }
        }
        guard let rawFlags = object["flags"], !rawFlags.isNull else {
            // FF-7: a plan without feature flags: a valid, complete, empty set.
            if lenient {
                let finding = AnswerFinding(path: "response.flags", kind: .missing, fatal: false,
                                              handling: " (read as no flags: a plan without feature flags)")
                guard found(finding) else { return nil }
            }
            return fatal ? nil : FlagsResponse(flags: [:], partial: partial)
        }
        guard let list = rawFlags.arrayValue else {
            _ = found(AnswerFinding(path: "response.flags", kind: .wrongKind(expected: "an array", found: rawFlags)))
            return nil
        }
        var flags: [String: FeatureFlag] = [:]
        var lastIndex: [String: Int] = [:]
        for (index, item) in list.enumerated() {
            // Built only for a finding: the refresh path walks every flag and finds nothing.
            func path(_ member: String = "") -> String { "response.flags[\(index)]" + member }
            guard let member = item.objectValue else {
                guard found(AnswerFinding(path: path(), kind: .wrongKind(expected: "an object", found: item))) else { return nil }
                continue
            }
            var key: String?
            switch member["key"] {
            case nil: guard found(AnswerFinding(path: path(".key"), kind: .missing)) else { return nil }
            case .string(let k)?:
                key = k
                if lenient {
                    if let previous = lastIndex[k] {
                        let finding = AnswerFinding(path: path(".key"), kind: .repeatedKey(k, previous: previous), fatal: false,
                                                      handling: "; the last one wins")
                        guard found(finding) else { return nil }
                    }
                    lastIndex[k] = index
                }
            case let other?: guard found(AnswerFinding(path: path(".key"), kind: .wrongKind(expected: "a string", found: other))) else { return nil }
            }
            var enabled: Bool?
            switch member["enabled"] {
            case .bool(let b)?: enabled = b
            case let other:
                let kind: AnswerFinding.Kind = other.map { .wrongKind(expected: "a boolean", found: $0) } ?? .missing
                guard found(AnswerFinding(path: path(".enabled"), kind: kind, detail: key.map { "flag \($0)" })) else { return nil }
            }
            // docs/device-api.md A.3: `"default"` when no rule matched, `""` when killed. Without
            // a rule id the server named no rule: served as `"default"`, so isEnabled, the reason
            // (DEFAULT) and OFREP's variant agree; `""` would call an enabled flag killed.
            var ruleId = "default"
            switch member["rule_id"] {
            case .string(let r)?: ruleId = r
            case let other:
                let kind: AnswerFinding.Kind = other.map { .wrongKind(expected: "a string", found: $0) } ?? .missing
                if lenient, !found(AnswerFinding(path: path(".rule_id"), kind: kind, fatal: false, handling: " (served as \"default\")")) { return nil }
            }
            let properties = member["properties"]?.objectValue
            if lenient, let raw = member["properties"], properties == nil {
                let finding = AnswerFinding(path: path(".properties"), kind: .wrongKind(expected: "an object", found: raw), fatal: false,
                                              handling: " (served as {})")
                guard found(finding) else { return nil }
            }
            if lenient {
                for name in member.keys.sorted() where !["key", "enabled", "rule_id", "properties"].contains(name) {
                    guard found(AnswerFinding(path: path(".\(name)"), kind: .notInContract, fatal: false)) else { return nil }
                }
            }
            if let key, let enabled {
                flags[key] = FeatureFlag(key: key, isEnabled: enabled, ruleId: ruleId, properties: properties ?? [:])
            }
        }
        return fatal ? nil : FlagsResponse(flags: flags, partial: partial)
    }
}

// MARK: - The answer against the contract (`pushwoosh-agentd --doctor`)

extension PushwooshAPI {
    /// Where an answer departs from the contract (A.1, A.3): a JSON path (`response.flags`,
    /// `response.flags[2].enabled`) and what was found there. `fatal`: the agent cannot use the
    /// answer (RF-7); otherwise it uses it as described (a missing `rule_id` is served as "default").
    public struct Deviation: Sendable, Equatable {
        public var path: String
        public var problem: String
        public var fatal: Bool

        public init(_ path: String, _ problem: String, fatal: Bool) {
            self.path = path
            self.problem = problem
            self.fatal = fatal
        }
    }

    /// Every deviation of a `getFeatureFlags` answer (HTTP status and body) from A.1 and A.3,
    /// in document order; empty when it is exactly what the agent expects. The fatal ones are
    /// what `classify` and `parseFlags` refuse; the others are what they read leniently.
    public static func flagsAnswerDeviations(status: Int, body: [UInt8]) -> [Deviation] {
        var out: [Deviation] = []
        if status != 200 { out.append(Deviation("(HTTP status)", "\(status), expected 200", fatal: true)) }
        let deviation: (AnswerFinding) -> Bool = { finding in
            out.append(finding.deviation)
            return true
        }
        guard let top = walkEnvelope(body, lenient: true, report: deviation) else { return out }
        _ = walkFlagsResponse(top["response"], lenient: true, report: deviation)
        return out
    }
}
