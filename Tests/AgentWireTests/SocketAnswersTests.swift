import AgentCore
import AgentWire
import Foundation
import Testing

/// The `get` and `status` answers as values both ways: what the daemon encodes, clients
/// decode to the same value, and a malformed answer is an error naming its field.
@Suite struct SocketAnswersTests {
    static let status = AgentStatus(
        state: .stale, applicationCode: "ABCDE-12345", hwid: "H", userId: "alice", appState: .background,
        sessionStartedAt: Date(timeIntervalSince1970: 1_796_000_000), pushRegistered: true, pushToken: "t0k",
        notificationAuthorization: .authorized, flagsCount: 3, flagsSource: .cache, flagsAgeSeconds: 12.345,
        flagsExpireAt: Date(timeIntervalSince1970: 1_796_086_400), flagsPartial: false,
        lastRefreshAt: Date(timeIntervalSince1970: 1_796_000_100), lastRefreshError: RefreshError(code: 503, message: "HTTP 503"),
        consecutiveFailures: 2, nextRefreshAt: nil, refreshInFlight: false, storageError: nil)

    @Test func statusRoundTrips() throws {
        let answer = StatusAnswer(version: "0.1.0", status: Self.status)
        #expect(try StatusAnswer(json: answer.json) == answer)
        #expect(try StatusAnswer(json: JSONReader.parse(JSONWriter.encode(answer.json))) == answer)
        #expect(answer.json["lastRefreshError"] == ["domain": "PWFeatureFlagsErrorDomain", "code": 503, "message": "HTTP 503"])
        #expect(answer.json["nextRefreshAt"] == .null)
        #expect(answer.json["flagsExpireAt"] == "2026-12-01T00:53:20Z")
        #expect(answer.json["storageError"] == .null)
    }

    /// The device's time and the last refresh's trigger travel too (`fleet status` reads ages
    /// against the device's `now`; a wait that timed out names the trigger); an older agent's
    /// answer without them still reads.
    @Test func deviceTimeAndTheLastTrigger() throws {
        var status = Self.status
        status.now = Date(timeIntervalSince1970: 1_796_010_800)
        status.lastRefreshTrigger = .periodic
        let answer = StatusAnswer(version: "0.1.0", status: status)
        #expect(answer.json["now"] == "2026-11-30T03:53:20Z")
        #expect(answer.json["lastRefreshTrigger"] == "periodic")
        #expect(try StatusAnswer(json: JSONReader.parse(JSONWriter.encode(answer.json))) == answer)
        var older = answer.json.objectValue!
        older["now"] = nil
        older["lastRefreshTrigger"] = nil
        let read = try StatusAnswer(json: .object(older))
        #expect(read.status.now == nil && read.status.lastRefreshTrigger == nil)
        older["lastRefreshTrigger"] = "sometimes"
        #expect(throws: AnswerError.self) { try StatusAnswer(json: .object(older)) }
        #expect(StatusAnswer.fields.contains("now") && StatusAnswer.fields.contains("lastRefreshTrigger"))
    }

    @Test func fallbackWordsTravelWithTheCode() throws {
        let p = Provenance(reason: .error, errorCode: .typeMismatch, errorMessage: #"flag "k" has no property "p""#,
                           source: .network, ageSeconds: 1)
        let json = FlagAnswers.property(7, p)
        #expect(json["errorMessage"] == #"flag "k" has no property "p""#)
        let answer = FlagAnswer(flag: nil, provenance: p)
        #expect(try FlagAnswer(json: answer.json) == answer)
        #expect(FlagAnswers.isEnabled(true, Provenance(reason: .default, source: .cache, ageSeconds: 0))["errorMessage"] == nil)
    }

    @Test func storageErrorIsAMessageWithItsTime() throws {
        var status = Self.status
        status.storageError = StorageProblem(.save, message: "write state.json.tmp: No space left on device (errno 28)",
                                             at: Date(timeIntervalSince1970: 1_796_000_200))
        let answer = StatusAnswer(version: "0.1.0", status: status)
        #expect(answer.json["storageError"] == ["operation": "save", "message": "write state.json.tmp: No space left on device (errno 28)",
                                                "at": "2026-11-30T00:56:40Z"])
        #expect(try StatusAnswer(json: JSONReader.parse(JSONWriter.encode(answer.json))) == answer)
        var bad = answer.json.objectValue!
        bad["storageError"] = "disk full"
        #expect(throws: AnswerError("storageError", "expected an object, found \"disk full\"")) { try StatusAnswer(json: .object(bad)) }
        bad["storageError"] = ["operation": "save", "message": "x"]
        #expect(throws: AnswerError("storageError.at", "missing")) { try StatusAnswer(json: .object(bad)) }
    }

    @Test func registrationAnswersRoundTrip() throws {
        for answer in [RegistrationAnswer(granted: true, pushToken: "ab12"), RegistrationAnswer(granted: false, pushToken: nil)] {
            #expect(try RegistrationAnswer(json: JSONReader.parse(JSONWriter.encode(answer.json))) == answer)
        }
        #expect(RegistrationAnswer(granted: false, pushToken: nil).json == ["granted": false, "pushToken": nil])
        #expect(throws: AnswerError("granted", "missing")) { try RegistrationAnswer(json: ["pushToken": "x"]) }
        #expect(throws: AnswerError("pushToken", "expected a string, found 5")) { try RegistrationAnswer(json: ["granted": true, "pushToken": 5]) }
    }

    @Test func flagAnswersRoundTrip() throws {
        let served = FlagAnswer(flag: FeatureFlag(key: "new_checkout", isEnabled: true, ruleId: "r1", properties: ["n": 3]),
                                provenance: Provenance(reason: .targetingMatch, source: .network, ageSeconds: 1.5))
        #expect(try FlagAnswer(json: served.json) == served)
        let missing = FlagAnswer(flag: nil, provenance: Provenance(reason: .error, errorCode: .flagNotFound, source: .network, ageSeconds: 0))
        #expect(try FlagAnswer(json: missing.json) == missing)
        let none = FlagAnswer(flag: nil, provenance: Provenance(reason: .error, errorCode: .providerNotReady, source: .none, ageSeconds: nil))
        #expect(try FlagAnswer(json: none.json) == none)
    }

    func refused(_ json: JSONValue, status: Bool) -> String? {
        do {
            if status { _ = try StatusAnswer(json: json) } else { _ = try FlagAnswer(json: json) }
            return nil
        } catch {
            return error.field
        }
    }

    @Test func malformedAnswersNameTheField() {
        var status = StatusAnswer(version: "0.1.0", status: Self.status).json.objectValue!
        #expect(refused(.object(status), status: true) == nil)
        status["state"] = "sleepy"
        #expect(refused(.object(status), status: true) == "state")
        status["state"] = "ready"
        status["flagsExpireAt"] = "tomorrow"
        #expect(refused(.object(status), status: true) == "flagsExpireAt")
        status["flagsExpireAt"] = nil
        status["lastRefreshError"] = ["domain": "PWFeatureFlagsErrorDomain", "code": "503", "message": "x"]
        #expect(refused(.object(status), status: true) == "lastRefreshError.code")
        status["lastRefreshError"] = ["code": 503, "message": "x"]
        #expect(refused(.object(status), status: true) == "lastRefreshError.domain")
        status["lastRefreshError"] = "boom"  // not an object: refused, not read as absent
        #expect(refused(.object(status), status: true) == "lastRefreshError")
        status["lastRefreshError"] = nil
        status["hwid"] = nil
        #expect(refused(.object(status), status: true) == "hwid")
        #expect(refused("ok", status: true) == "result")
        #expect(refused(["reason": "DEFAULT", "source": "network", "flag": ["key": "k", "isEnabled": "yes", "ruleId": "r", "properties": [:]]],
                        status: false) == "flag.isEnabled")
        #expect(refused(["reason": "SOMETIMES", "source": "network"], status: false) == "reason")
        #expect(refused(["reason": "DEFAULT", "source": "network", "flag": 5], status: false) == "flag")
    }

    @Test func refreshAnswersRoundTripAndNameTheField() throws {
        let failed = RefreshAnswer(error: RefreshError(code: 503, message: "HTTP 503"), sent: true)
        #expect(try RefreshAnswer(json: failed.json) == failed)
        let throttled = RefreshAnswer(error: nil, sent: false, throttledUntil: Date(timeIntervalSince1970: 1_764_669_900))
        #expect(throttled.json == ["error": nil, "sent": false, "throttledUntil": "2025-12-02T10:05:00Z"])
        #expect(try RefreshAnswer(json: throttled.json) == throttled)
        #expect(RefreshAnswer(error: nil, sent: true).json == ["error": nil, "sent": true, "throttledUntil": nil])
        // An agent without the field reads as "no throttle window".
        #expect(try RefreshAnswer(json: ["error": nil, "sent": false]) == RefreshAnswer(error: nil, sent: false))
        func field(_ json: JSONValue) -> String? {
            do throws(AnswerError) { _ = try RefreshAnswer(json: json); return nil } catch { return error.field }
        }
        #expect(field(["error": nil]) == "sent")
        #expect(field(["error": nil, "sent": false, "throttledUntil": "soon"]) == "throttledUntil")
        #expect(field(["error": nil, "sent": true, "throttledUntil": "2025-12-02T10:05:00Z"]) == "throttledUntil")
        #expect(field(["error": ["domain": "NSURLErrorDomain", "code": 1, "message": "x"], "sent": true]) == "error.domain")
        #expect(field(["error": ["domain": "PWFeatureFlagsErrorDomain", "message": "x"], "sent": true]) == "error.code")
        #expect(field(["error": "failed", "sent": true]) == "error")
    }
}
