import AgentCore
import EmulatorCore
import Foundation

/// An emulator state on a `ManualClock`: the lab's tests run in virtual time.
struct Lab {
    let clock = ManualClock(t0)
    var state: EmulatorState

    init(apps: [JSONValue] = [exampleApp]) throws {
        var decoded: [Application] = []
        for a in apps { decoded.append(try Application(json: a)) }
        state = EmulatorState(apps: decoded, clock: clock)
    }

    /// A device call by `hwid` (and `userId`, when given) at the clock's time.
    mutating func call(_ method: String = "getFeatureFlags", hwid: String = "h1", userId: String? = nil,
                       _ fields: [String: JSONValue] = [:]) -> Outcome {
        var request: [String: JSONValue] = ["application": "ABCDE-12345", "hwid": .string(hwid), "v": "7.2.10", "device_type": 1]
        if let userId { request["userId"] = .string(userId) }
        request.merge(fields) { _, new in new }
        return state.handle(EmulatorRequest(method: "POST", path: "/json/1.3/\(method)",
                                            body: JSONWriter.encode(["request": .object(request)])))
    }

    mutating func admin(_ verb: String, _ path: String, _ body: JSONValue? = nil, query: [String: String] = [:]) -> Outcome {
        state.handle(EmulatorRequest(method: verb, path: path, query: query, body: body.map(JSONWriter.encode) ?? []))
    }

    mutating func arm(_ fault: JSONValue) -> Outcome { admin("POST", "/admin/faults", fault) }

    /// `GET /admin/requests/count` with these filters.
    mutating func count(_ query: [String: String]) -> Int? {
        admin("GET", "/admin/requests/count", query: query).json?["count"]?.numberValue.map { Int($0) }
    }

    /// Everything stored, to show that a rejected call changed nothing.
    var snapshot: String {
        JSONWriter.string(state.document.json) + JSONWriter.string(.array(state.faults.entries.map(\.json)))
            + "\(state.requestLog.count(RequestFilter())) \(state.parkedWaits)"
    }
}

extension Outcome {
    /// Whether the call failed by a fault (not answered 200 with status_code 200).
    var failed: Bool { drop || status != 200 || json?["status_code"] != 200 }
}
