import AgentCore
import Foundation

/// docs/emulator.md D.3's calls: waiting for and counting requests, the emulator's clock,
/// reset, and the whole state.
extension EmulatorState {
    /// Ten years: the furthest the emulator's clock may run ahead of the host's.
    public static let maxClockOffset = 315_360_000.0

    mutating func lab(_ p: PreparedRequest, now: Date, hostNow: Date) -> Outcome {
        let verb = p.request.method
        func body() -> Result<JSONValue, DefinitionError> {
            p.json ?? .failure(DefinitionError([], "empty body (expected JSON)"))
        }
        do throws(DefinitionError) {
            switch p.route {
            case .requestsCount:
                return .json(200, .object(["count": .number(Double(requestLog.count(try RequestFilter(query: p.request.query))))]))

            case .requestsWait:
                let wait = try RequestWait(query: p.request.query)
                if let now = answer(wait, timedOut: wait.timeout == 0) { return now }
                return .parked(wait, ticket: park(wait))

            case .clock:
                if verb == "POST" {
                    let r = try ObjectReader(body().get(), at: [], allowed: ["advanceSeconds", "set"])
                    let advance = try r.number("advanceSeconds", expectation: "a number of seconds 0-\(Int(Self.maxClockOffset))",
                                               range: 0...Self.maxClockOffset)
                    let set = try r.string("set")
                    var target: Date
                    switch (advance, set) {
                    case (let seconds?, nil): target = now.addingTimeInterval(seconds)
                    case (nil, let text?):
                        guard let d = Timestamp.parse(text) else {
                            throw DefinitionError([.key("set")], "expected an ISO 8601 time, found \"\(text)\"")
                        }
                        guard d >= now else {
                            throw DefinitionError([.key("set")], "\(text) is before the emulator's time \(Timestamp.format(now)) (the clock only moves forward)")
                        }
                        target = d
                    case (_?, _?): throw DefinitionError([.key("set")], "expected only one of advanceSeconds, set")
                    case (nil, nil): throw DefinitionError([], "expected one of advanceSeconds, set")
                    }
                    let offset = target.timeIntervalSince(hostNow)
                    guard offset <= Self.maxClockOffset else {
                        throw DefinitionError([.key(advance != nil ? "advanceSeconds" : "set")],
                                              "would put the clock more than \(Int(Self.maxClockOffset)) s ahead of the host's")
                    }
                    clockOffset = max(clockOffset, offset)
                    target = emulatorTime(hostNow)
                    faults.expire(target)
                    return .json(200, clockJSON(target), events: ["clock set now=\(Timestamp.format(target)) offsetSeconds=\(clockOffset)"])
                }
                return .json(200, clockJSON(now))

            case .reset:
                reset()
                return .json(200, .object(["reset": true]), events: ["emulator reset apps=\(apps.count)"])

            case .state:
                if verb == "PUT" {
                    let doc = try StateDocument(json: body().get())
                    load(doc)
                    return .json(200, document.json, events: ["state loaded apps=\(apps.count) devices=\(devices.count)"])
                }
                return .json(200, document.json)

            default:
                return .error(404, "no such route: \(p.request.path)")
            }
        } catch {
            return .invalid(error)
        }
    }

    func clockJSON(_ now: Date) -> JSONValue {
        .object(["now": .string(Timestamp.format(now)), "unixTime": .number(now.timeIntervalSince1970),
                 "offsetSeconds": .number(clockOffset)])
    }

    /// The answer to a parked wait: 200 with the matching requests once `count` exist,
    /// 408 with what has arrived when `timedOut`, else nil (keep waiting).
    public func answer(_ wait: RequestWait, timedOut: Bool) -> Outcome? {
        let selected = requestLog.select(wait.filter)
        let body: [String: JSONValue] = ["requests": .array(selected.map(\.json)), "count": .number(Double(selected.count))]
        if selected.count >= wait.count { return .json(200, .object(body)) }
        guard timedOut else { return nil }
        var timeout = body
        timeout["error"] = .string("timed out after \(wait.timeout) s: \(selected.count) of \(wait.count) requests arrived")
        return .json(408, .object(timeout))
    }
}
