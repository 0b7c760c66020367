import AgentCore
import AgentWire
import FoundationEssentials

/// OpenFeature Remote Evaluation Protocol v1 on the agent's flags (docs/http.md F.1, field
/// names and error shapes of open-feature/protocol `service/openapi.yaml`).
///
/// Every answer is built from `Agent.get`, the read behind the socket's `get`, `isEnabled`
/// and `property`: a flag `KEY` is its `isEnabled`; `KEY.P` is property `P` of flag `KEY`.
/// Reading changes nothing and never waits for the network (FF-3).
enum OFREP {
    /// One evaluation: an HTTP status and an OFREP body (`evaluationSuccess`,
    /// `evaluationFailure` or `flagNotFound`).
    struct Answer {
        var status: Int
        var body: JSONValue
    }

    /// `POST /ofrep/v1/evaluate/flags/{key}`.
    static func evaluate(_ key: String, body: [UInt8], agent: Agent) -> Answer {
        if let rejection = checkRequest(body, key: key, agent: agent) { return rejection }
        return evaluate(key, agent: agent)
    }

    static func evaluate(_ key: String, agent: Agent) -> Answer {
        let found = agent.get(key)
        if found.provenance.errorCode == .providerNotReady { return notReady(key) }
        let fetchedAt = agent.servedFlagsReceivedAt
        if let flag = found.value {
            return Answer(status: 200, body: success(key, .bool(flag.isEnabled), flag, found.provenance, fetchedAt))
        }
        // KEY.P: the longest flag key first ("a.b" + "c" before "a" + "b.c").
        var index = key.endIndex
        while let dot = key[..<index].lastIndex(of: ".") {
            index = dot
            let flagKey = String(key[..<dot]), property = String(key[key.index(after: dot)...])
            guard !flagKey.isEmpty, !property.isEmpty else { continue }
            let e = agent.get(flagKey)
            guard let flag = e.value else { continue }
            guard let value = flag.properties[property] else {
                return notFound(key, "flag '\(flagKey)' has no property '\(property)'")
            }
            return Answer(status: 200, body: success(key, value, flag, e.provenance, fetchedAt))
        }
        return notFound(key, "flag '\(key)' was not found")
    }

    /// `POST /ofrep/v1/evaluate/flags`: every flag and every `KEY.P`, sorted by key, built at
    /// once through `evaluate`, and the event stream to hear of changes on (docs/http.md F.3). The agent serves the same bytes built a slice at a time
    /// (`BulkAnswers`, OFREPBulk.swift); this plain build is what the tests hold it to.
    static func bulk(body: [UInt8], agent: Agent) -> Answer {
        if let rejection = checkRequest(body, key: nil, agent: agent) { return rejection }
        guard let served = agent.servedFlagKeys() else { return notReady(nil) }
        var keys = Set(served)
        for key in served {
            guard let flag = agent.get(key).value else { continue }
            for name in flag.properties.keys { keys.insert(key + "." + name) }  // an exact key wins in `evaluate`
        }
        var items: [JSONValue] = []
        for key in keys.sorted() {
            let answer = evaluate(key, agent: agent)
            if answer.status == 200 { items.append(answer.body) }
        }
        return Answer(status: 200, body: ["flags": .array(items), "eventStreams": OFREPEvents.bulkEventStreams])
    }

    // MARK: - Pieces

    /// The request as the OFREP schema has it, `{"context": {…}}`: PARSE_ERROR for a body that
    /// is missing, not JSON or not an object; INVALID_CONTEXT for a `context` that is missing
    /// or not an object, a `targetingKey` that is not a string, or one other than the current
    /// User ID (the HWID when none is set). A context without a `targetingKey` is accepted:
    /// OpenFeature's targeting key is optional, and the agent serves its own user's flags.
    static func checkRequest(_ body: [UInt8], key: String?, agent: Agent) -> Answer? {
        func reject(_ code: String, _ details: String) -> Answer { Answer(status: 400, body: failure(key, code, details)) }
        if body.allSatisfy({ $0 == 0x20 || $0 == 0x0A || $0 == 0x0D || $0 == 0x09 }) {
            return reject("PARSE_ERROR", #"the request body is missing (expected {"context": {…}})"#)
        }
        let request: JSONValue
        do {
            request = try JSONReader.parse(body)
        } catch {
            return reject("PARSE_ERROR", "the request body is not JSON: \(error)")
        }
        guard case .object(let fields) = request else {
            return reject("PARSE_ERROR", "the request body must be a JSON object, found \(request.kindName)")
        }
        guard let context = fields["context"] else {
            return reject("INVALID_CONTEXT", #"context is missing (expected {"context": {…}}; it may be empty)"#)
        }
        guard case .object(let attributes) = context else {
            return reject("INVALID_CONTEXT", "context must be an object, found \(context.kindName)")
        }
        guard let targetingKey = attributes["targetingKey"] else { return nil }
        guard case .string(let given) = targetingKey else {
            return reject("INVALID_CONTEXT", "targetingKey must be a string, found \(targetingKey.kindName)")
        }
        let current = agent.userId
        guard given == current else {
            return reject("INVALID_CONTEXT",
                          "targetingKey '\(given)' is not the agent's current User ID '\(current)': the agent serves one user's flags (set it with setUserId)")
        }
        return nil
    }

    /// The OFREP reason of a flag's OpenFeature reason: OFREP's schema allows STATIC,
    /// TARGETING_MATCH, SPLIT, DISABLED and UNKNOWN, not DEFAULT, so a flag no rule matched (its
    /// value the same for every user not targeted) is STATIC there; `metadata.reason` keeps the
    /// OpenFeature reason as the socket API says it (docs/http.md F.1).
    static func reason(_ reason: EvaluationReason) -> String {
        reason == .default ? "STATIC" : reason.rawValue
    }

    static func success(_ key: String, _ value: JSONValue, _ flag: FeatureFlag, _ p: Provenance, _ fetchedAt: Date?) -> JSONValue {
        var metadata: [String: JSONValue] = ["ruleId": .string(flag.ruleId), "source": .string(p.source.rawValue),
                                             "reason": .string(flag.reason.rawValue)]
        if let fetchedAt { metadata["fetchedAt"] = SocketTime.json(fetchedAt) }
        return ["key": .string(key), "value": value, "reason": .string(reason(flag.reason)),
                "variant": .string(flag.ruleId.isEmpty ? "killed" : flag.ruleId), "metadata": .object(metadata)]
    }

    static func failure(_ key: String?, _ code: String, _ details: String) -> JSONValue {
        var o: [String: JSONValue] = ["errorCode": .string(code), "errorDetails": .string(details)]
        if let key { o["key"] = .string(key) }
        return .object(o)
    }

    static func notFound(_ key: String, _ details: String) -> Answer {
        Answer(status: 404, body: failure(key, "FLAG_NOT_FOUND", details))
    }

    /// No valid flags (B.1 PROVIDER_NOT_READY): a 400 whose `errorCode` OpenFeature's OFREP
    /// providers pass on as the SDK's PROVIDER_NOT_READY (the caller's default is returned).
    static func notReady(_ key: String?) -> Answer {
        Answer(status: 400, body: failure(key, "PROVIDER_NOT_READY", "no valid flags yet (none fetched, expired or discarded); see /readyz"))
    }
}
