import AgentCore
import AgentWire
import Foundation
import Testing

/// `clock`, `advanceClock` and the notifications as values both ways: what the daemon
/// writes reads back to the same value (through the bytes too), and a malformed one is an
/// error naming its field.
@Suite struct ClockAndNotificationAnswersTests {
    static let t = Date(timeIntervalSince1970: 1_796_000_000)

    func field(_ read: () throws -> Void) -> String? {
        do { try read(); return nil } catch let error as AnswerError { return error.field } catch { return "not an AnswerError: \(error)" }
    }

    func throughBytes(_ json: JSONValue) throws -> JSONValue { try JSONReader.parse(JSONWriter.encode(json)) }

    @Test func clockAnswersRoundTrip() throws {
        let clock = ClockAnswer(now: Self.t, offsetSeconds: 3600.0004, controlled: true,
                                nextTimerAt: Self.t.addingTimeInterval(59.25), requestsInFlight: 1)
        #expect(clock.offsetSeconds == 3600)  // to the millisecond
        #expect(clock.json["nextTimerAt"] == "2026-11-30T00:54:19.250Z")
        #expect(try ClockAnswer(json: throughBytes(clock.json)) == clock)
        let idle = ClockAnswer(now: Self.t, offsetSeconds: 0, controlled: false, nextTimerAt: nil, requestsInFlight: 0)
        #expect(idle.json["nextTimerAt"] == .null)
        #expect(try ClockAnswer(json: idle.json) == idle)

        let advance = AdvanceClockAnswer(now: Self.t, offsetSeconds: 7200, fired: [
            FiredTimer(at: Self.t.addingTimeInterval(-1800), event: FiredTimer.sessionEnd),
            FiredTimer(at: Self.t.addingTimeInterval(-60), event: "refresh", trigger: .periodic),
        ], requests: 1)
        #expect(advance.json["fired"]?.arrayValue?.first == ["at": "2026-11-30T00:23:20.000Z", "event": "sessionEnd"])
        // A timer's device time is not a whole second: it is told to the millisecond, not cut to the second.
        #expect(FiredTimer(at: Self.t.addingTimeInterval(0.25), event: "refresh").json["at"] == "2026-11-30T00:53:20.250Z")
        #expect(try AdvanceClockAnswer(json: throughBytes(advance.json)) == advance)
        let flowed = AdvanceClockAnswer(now: Self.t, offsetSeconds: 1, fired: [], requests: 0,
                                        firedBefore: [FiredTimer(at: Self.t.addingTimeInterval(-0.5), event: "retry", trigger: .retry, requests: 1)],
                                        firedBeforeDropped: 2)
        #expect(flowed.json["firedBefore"] == [["at": "2026-11-30T00:53:19.500Z", "event": "retry", "trigger": "retry", "requests": 1]])
        #expect(flowed.json["firedBeforeDropped"] == 2)
        #expect(try AdvanceClockAnswer(json: throughBytes(flowed.json)) == flowed)
        // An agent from before firedBefore (attached to a lab) told of none.
        let older = try AdvanceClockAnswer(json: ["now": "2026-11-30T00:53:20Z", "offsetSeconds": 1, "requests": 0, "fired": []])
        #expect(older.firedBefore.isEmpty && older.firedBeforeDropped == 0)
    }

    @Test func malformedClockAnswersNameTheField() {
        let good = ClockAnswer(now: Self.t, offsetSeconds: 1, controlled: true, nextTimerAt: nil, requestsInFlight: 0).json.objectValue!
        var bad = good
        bad["now"] = "yesterday"
        #expect(field { _ = try ClockAnswer(json: .object(bad)) } == "now")
        bad = good
        bad["requestsInFlight"] = nil
        #expect(field { _ = try ClockAnswer(json: .object(bad)) } == "requestsInFlight")
        let advance: JSONValue = ["now": "2026-11-30T00:53:20Z", "offsetSeconds": 1, "requests": 0,
                                  "fired": [["at": "2026-11-30T00:53:20Z", "event": "refresh", "trigger": "sometimes"]]]
        #expect(field { _ = try AdvanceClockAnswer(json: advance) } == "fired[0].trigger")
        #expect(field { _ = try AdvanceClockAnswer(json: ["now": "2026-11-30T00:53:20Z", "offsetSeconds": 1, "requests": 0, "fired": [5]]) }
            == "fired[0]")
        #expect(field { _ = try AdvanceClockAnswer(json: ["now": "2026-11-30T00:53:20Z", "offsetSeconds": 1, "requests": 0]) } == "fired")
        #expect(field { _ = try AdvanceClockAnswer(json: ["now": "2026-11-30T00:53:20Z", "offsetSeconds": 1, "requests": 0, "fired": [],
                                                          "firedBefore": [["at": "soon", "event": "refresh"]]]) } == "firedBefore[0].at")
    }

    @Test func notificationsRoundTrip() throws {
        let all: [SocketNotification] = [
            .flagsDidUpdate(reason: .refresh, changed: ["a", "b"], at: Self.t),
            .flagsDidUpdate(reason: .expired, changed: [], at: nil),
            .refreshCompleted(trigger: .periodic, error: nil, sent: true, at: Self.t),
            .refreshCompleted(trigger: .manual, error: RefreshError(code: 0, message: "no answer"), sent: false, at: Self.t),
            .stateChanged(state: .stale, previous: .ready, at: Self.t),
            .stateChanged(state: .notReady, previous: nil, at: Self.t),
        ]
        for n in all {
            #expect(try SocketNotification(method: n.method, params: throughBytes(n.params)) == n)
        }
        #expect(all.map(\.event) == [.flags, .flags, .refresh, .refresh, .state, .state])
        #expect(all[0].method == "featureFlagsDidUpdate")
        #expect(all[0].params == ["reason": "refresh", "changed": ["a", "b"], "at": "2026-11-30T00:53:20Z"])
        #expect(all.map(\.at) == [Self.t, nil, Self.t, Self.t, Self.t, Self.t])
        // An agent that does not stamp the update is still understood.
        #expect(try SocketNotification(method: "featureFlagsDidUpdate", params: ["reason": "refresh", "changed": []])
            == .flagsDidUpdate(reason: .refresh, changed: [], at: nil))
        #expect(all[4].params == ["state": "stale", "previous": "ready", "at": "2026-11-30T00:53:20Z"])
    }

    @Test func malformedNotificationsNameTheField() {
        #expect(field { _ = try SocketNotification(method: "featureFlagsDidUpdate", params: ["reason": "refresh", "changed": ["a", 1]]) }
            == "params.changed[1]")
        #expect(field { _ = try SocketNotification(method: "featureFlagsDidUpdate", params: ["reason": "because", "changed": []]) }
            == "params.reason")
        #expect(field { _ = try SocketNotification(method: "refreshCompleted", params: ["trigger": "periodic", "error": nil, "at": "2026-11-30T00:53:20Z"]) }
            == "params.sent")
        #expect(field { _ = try SocketNotification(method: "stateChanged", params: "ready") } == "params")
        #expect(field { _ = try SocketNotification(method: "featureFlagsDidUpdate", params: ["reason": "refresh", "changed": [], "at": "soon"]) }
            == "params.at")
        #expect(field { _ = try SocketNotification(method: "somethingElse", params: [:]) } == "method")
    }
}
