import AgentCore
import Foundation

extension EmulatorState {
    // MARK: - Device API (docs/device-api.md A)

    static func envelope(_ code: Int, _ message: String, _ response: JSONValue = .null) -> JSONValue {
        .object(["status_code": .number(Double(code)), "status_message": .string(message), "response": response])
    }

    /// A refused device call (HTTP 400): the envelope plus `path`, where in the body the problem is.
    static func refused(_ e: DefinitionError) -> Outcome {
        guard case .object(var o) = envelope(400, e.description) else { return .json(400, .null) }
        o["path"] = .string(e.path)
        return .json(400, .object(o))
    }

    mutating func device(_ method: String, _ p: PreparedRequest, now: Date) -> Outcome {
        let (outcome, fault) = deviceOutcome(method, p, now: now)
        let body: JSONValue
        switch p.json {
        case .success(let v)?: body = v
        case .failure?: body = .string(String(decoding: p.request.body, as: UTF8.self))
        case nil: body = .null
        }
        let (hwid, userId) = caller(p)
        // The log never shows a credential: Authorization keeps its scheme, the tokens go.
        let call = RecordedRequest(time: now, method: method, headers: configuration.redact(p.request.headers), body: configuration.redact(body),
                                   status: outcome.drop ? nil : outcome.status, fault: fault?.kind.name, hwid: hwid, userId: userId)
        requestLog.append(call)
        var answered = outcome
        if outcome.forward { answered.forwardedCall = requestLog.appended - 1 }
        answered.woken = wakeParkedWaits(for: call)
        return answered
    }

    /// The answer to a device API call and the fault that fired for it, if any.
    mutating func deviceOutcome(_ method: String, _ p: PreparedRequest, now: Date) -> (Outcome, Fault?) {
        guard DeviceMethods.isKnown(method) else {  // recorded, so a tester sees what was called
            return (.json(404, Self.envelope(404, DeviceMethods.unknownMessage(method))), nil)
        }
        if let token = configuration.requireToken, p.request.header("Authorization") != "Token \(token)" {
            return (.json(401, Self.envelope(401, "Unauthorized: expected Authorization: Token <token>")), nil)
        }
        var fired: Fault?
        var partial = false
        var delayMs = 0
        var events: [String] = []
        var delivery = Outcome.Delivery.normal
        let (hwid, userId) = caller(p)
        if let (fault, remaining) = faults.next(for: method, hwid: hwid, userId: userId, now: now) {
            fired = fault
            delayMs = fault.delayMs
            events.append("fault fired method=\(method) kind=\(fault.kind.name) delayMs=\(fault.delayMs) "
                          + "remaining=\(remaining.map(String.init) ?? "unlimited") hwid=\(hwid ?? "-")")
            var failed: Outcome?
            switch fault.kind {
            case .http(let status, let retryAfter):
                failed = Outcome(status: status, headers: retryAfter.map { [HTTPHeader("Retry-After", String($0))] } ?? [],
                                 body: .json(Self.envelope(status, "Emulated HTTP \(status)")))
            case .statusCode(let code):
                failed = .json(200, Self.envelope(code, "Emulated status_code \(code)"))
            case .garbage:
                failed = Outcome(status: 200, body: .raw(Array("<html><body><h1>502 Bad Gateway</h1>emulated garbage</body></html>\n".utf8),
                                                         contentType: "text/html"))
            case .drop:
                failed = Outcome(status: 0, body: .json(.null), drop: true)
            case .partial:
                partial = true
                failed = nil
            case .delayOnly:
                failed = nil
            case .truncate(let n):
                delivery = .truncate(afterBytes: n)
                failed = nil
            case .stall:
                delivery = .stall
                failed = nil
            case .reset:
                failed = Outcome(status: 0, body: .json(.null), drop: true)
                failed?.delivery = .reset
            }
            if var failed {
                failed.delayMs = delayMs
                failed.events = events
                return (failed, fired)
            }
        }
        var outcome = configuration.upstream != nil ? Outcome.forwarded
            : configuration.replay != nil ? replayAnswer(method) : answer(method, p, partial: partial, now: now)
        outcome.delayMs = delayMs
        outcome.events = events
        outcome.delivery = delivery
        return (outcome, fired)
    }

    /// The caller's HWID and User ID from the body (the User ID the emulator knows
    /// for the HWID when the body has none).
    func caller(_ p: PreparedRequest) -> (hwid: String?, userId: String?) {
        let (hwid, userId) = p.caller
        return (hwid, userId ?? hwid.flatMap { devices[$0]?.userId })
    }

    mutating func answer(_ method: String, _ p: PreparedRequest, partial: Bool, now: Date) -> Outcome {
        func bad(_ e: DefinitionError) -> Outcome { Self.refused(e) }
        let root: JSONValue
        switch p.json {
        case .success(let v)?: root = v
        case .failure(let e)?: return bad(e)
        case nil: return bad(DefinitionError([], "empty body (expected {\"request\": {…}})"))
        }
        guard case .object(let top) = root else {
            return bad(DefinitionError([], "expected {\"request\": {…}}, found \(root.kindName)"))
        }
        guard let request = top["request"] else {
            return bad(DefinitionError([.key("request")], "missing (expected {\"request\": {…}})"))
        }
        let fields: [String: JSONValue]
        let hwid: String?
        let userId: String?
        do throws(DefinitionError) {
            guard case .object(let o) = request else {
                throw DefinitionError([.key("request")], "expected an object, found \(request.kindName)")
            }
            fields = o
            func string(_ key: String, required: Bool) throws(DefinitionError) -> String? {
                guard let v = o[key] else {
                    if required { throw DefinitionError([.key("request"), .key(key)], "missing (expected a string)") }
                    return nil
                }
                guard case .string(let s) = v else {
                    throw DefinitionError([.key("request"), .key(key)], "expected a string, found \(v.kindName)")
                }
                return s
            }
            _ = try string("application", required: true)
            hwid = try string("hwid", required: true)
            userId = try string("userId", required: false)
            _ = try string("v", required: false)
            if let t = o["device_type"], t.numberValue == nil {
                throw DefinitionError([.key("request"), .key("device_type")], "expected a number, found \(t.kindName)")
            }
        } catch {
            return bad(error)
        }
        guard let app = apps[fields["application"]!.stringValue!] else {
            return .json(200, Self.envelope(Self.applicationNotFoundCode, "Application not found"))
        }
        guard let known = PushwooshAPI.Method(rawValue: method), let hwid else {  // deviceOutcome answered the others
            return .json(404, Self.envelope(404, DeviceMethods.unknownMessage(method)))
        }

        var record = devices[hwid] ?? DeviceRecord(hwid: hwid)
        if let userId { record.userId = userId }
        record.lastSeen = now
        var response: JSONValue = .object([:])
        switch known {
        case .registerDevice:
            guard case .string(let token)? = fields["push_token"], !token.isEmpty else {
                return bad(DefinitionError([.key("request"), .key("push_token")], "expected a non-empty string"))
            }
            record.pushToken = token
            record.gateway = fields["gateway"]?.stringValue
        case .unregisterDevice:
            record.pushToken = nil
        case .postEvent:
            guard case .string(let name)? = fields["event"], !name.isEmpty else {
                return bad(DefinitionError([.key("request"), .key("event")], "expected a non-empty string"))
            }
            var attributes: [String: JSONValue] = [:]
            switch fields["attributes"] {
            case .object(let a)?: attributes = a
            case nil, .null?: break
            case let other?:
                return bad(DefinitionError([.key("request"), .key("attributes")], "expected an object, found \(other.kindName)"))
            }
            var time = now
            switch fields["timestampUTC"] {
            case .number(let t)?: time = Date(timeIntervalSince1970: t)
            case nil: break
            case let other?:
                return bad(DefinitionError([.key("request"), .key("timestampUTC")], "expected a number, found \(other.kindName)"))
            }
            record.record(PostedEvent(name: name, time: time, attributes: attributes))
        case .getFeatureFlags:
            let ctx = DeviceContext(hwid: hwid, userId: userId ?? record.userId ?? hwid, device: record, now: now,
                                        partial: partial)
            response = app.featureFlagsResponse(ctx)
        case .applicationOpen, .registerUser:  // the common fields say it all
            break
        }
        devices[hwid] = record
        return .json(200, Self.envelope(200, "OK", response))
    }

}
