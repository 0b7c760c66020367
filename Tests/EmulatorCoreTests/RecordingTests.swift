import AgentCore
import EmulatorCore
import Foundation
import Testing

/// Record and replay in pieces: the redactor's stable placeholders, the replay order (per
/// method, the last answer repeated, a reset starts again), and `--apps-from-har`.
@Suite struct RecordingTests {
    private func body(_ fields: [String: JSONValue]) -> [UInt8] { JSONWriter.encode(["request": .object(fields)]) }

    @Test func secretsBecomeStablePlaceholders() {
        var r = Redactor()
        let first = body(["application": "ABCDE-12345", "hwid": "HW-0001-AAAA", "userId": "alice-user", "push_token": "00ff00ff"])
        r.learn(headers: [HTTPHeader("Authorization", "Token T0KEN-secret")], body: first)
        r.learn(headers: [], body: body(["hwid": "HW-0002-BBBB", "userId": "HW-0002-BBBB"]))
        #expect(r.redact([HTTPHeader("Authorization", "Token T0KEN-secret")]) == [HTTPHeader("Authorization", "Token API-TOKEN-1")])
        let text = r.redactBody(first)
        #expect(text.contains("\"hwid\":\"HWID-1\"") && text.contains("\"userId\":\"USER-1\"") && text.contains("\"push_token\":\"PUSH-TOKEN-1\""))
        #expect(text.contains("ABCDE-12345"))  // the application code is not a secret
        // The same value is the same placeholder everywhere (a User ID equal to the HWID included).
        #expect(r.redactBody(body(["hwid": "HW-0002-BBBB", "userId": "HW-0002-BBBB", "note": "for HW-0001-AAAA"]))
            == #"{"request":{"hwid":"HWID-2","note":"for HWID-1","userId":"HWID-2"}}"#)
        #expect(r.redact("https://x/json/1.3/?t=T0KEN-secret") == "https://x/json/1.3/?t=API-TOKEN-1")
        #expect(r.redactBody(Array("not json alice-user".utf8)) == "not json USER-1")
    }

    /// Secrets in every spelling: header names in any case (`X-Api-Key`, `cookie`), JSON keys
    /// in any case and style (`HWID`, `user_id`, `UserID`, `pushToken`), numeric values.
    @Test func secretsAreFoundInEverySpelling() {
        var r = Redactor()
        let headers = [HTTPHeader("authorization", "Token T0KEN-secret"), HTTPHeader("X-API-KEY", "k3y-abcdef"),
                       HTTPHeader("Cookie", "sid=c00kie-value"), HTTPHeader("Content-Type", "application/json")]
        let sent = Array(#"{"request":{"HWID":"HW-0001-AAAA","user_id":12345,"device":{"PushToken":"00ff00ff","UserID":"carol-user"}}}"#.utf8)
        r.learn(headers: headers, body: sent)
        #expect(r.redact(headers) == [HTTPHeader("authorization", "Token API-TOKEN-1"), HTTPHeader("X-API-KEY", "API-KEY-1"),
                                      HTTPHeader("Cookie", "COOKIE-1"), HTTPHeader("Content-Type", "application/json")])
        #expect(r.redactBody(sent) == #"{"request":{"HWID":"HWID-1","device":{"PushToken":"PUSH-TOKEN-1","UserID":"USER-2"},"user_id":"USER-1"}}"#)
        // A secret key the request did not carry is still never written as is.
        #expect(r.redactBody(Array(#"{"hwid":"never-seen"}"#.utf8)) == #"{"hwid":"[redacted]"}"#)
    }

    @Test func formBodiesAndURLCredentialsAreRedacted() {
        var r = Redactor()
        let form = Array("application=ABCDE-12345&hwid=HW-0001-AAAA&user_id=42&push%5Ftoken=00ff%2B00&note=for+HW-0001-AAAA".utf8)
        r.learn(headers: [HTTPHeader("Content-Type", "application/x-www-form-urlencoded")], body: form)
        #expect(r.redactBody(form, contentType: "application/x-www-form-urlencoded")
                == "application=ABCDE-12345&hwid=HWID-1&user_id=USER-1&push%5Ftoken=PUSH-TOKEN-1&note=for+HWID-1")
        // Without a content type, a body that reads as a form and names a secret key is one.
        #expect(r.redactBody(Array("hwid=HW-0001-AAAA".utf8)) == "hwid=HWID-1")
        r.learn(url: "https://bob:pa55@upstream.example/json/1.3/getFeatureFlags")
        #expect(r.redact(url: "https://bob:pa55@upstream.example/json/1.3/getFeatureFlags")
                == "https://URL-CREDENTIALS-1@upstream.example/json/1.3/getFeatureFlags")
        #expect(Redactor.hidingCredentials("https://bob:pa55@upstream.example/x") == "https://[redacted]@upstream.example/x")
        #expect(Redactor.hidingCredentials("https://upstream.example/x@y") == "https://upstream.example/x@y")
    }

    @Test func aRecordingsPlaceholdersAreCountedToContinueThem() {
        var counts: [String: Int] = [:]
        let text = #"{"hwid":"HWID-3","n":"for HWID-12, SUPERUSER-9, USER-4x, API-TOKEN-2","p":"PUSH-TOKEN-1","big":"USER-99999999999"}"#
        Array(text.utf8).withUnsafeBytes { Redactor.highestNumbers(in: $0, into: &counts) }
        #expect(counts == ["HWID": 12, "API-TOKEN": 2, "PUSH-TOKEN": 1])
        var r = Redactor(continuingFrom: counts)
        r.learn(headers: [], body: Array(#"{"hwid":"new-device-1"}"#.utf8))
        #expect(r.redactBody(Array(#"{"hwid":"new-device-1"}"#.utf8)) == #"{"hwid":"HWID-13"}"#)
    }

    private func har(_ exchanges: [(String, Int, String)]) -> JSONValue {
        var log = HAR.emptyLog()
        let entries = exchanges.map { method, status, answer in
            HAR.entry(started: Date(timeIntervalSince1970: 0), milliseconds: 1, url: "https://x/json/1.3/\(method)",
                      requestHeaders: [], requestBody: #"{"request":{"application":"APP-1","hwid":"HWID-1"}}"#,
                      status: status, responseHeaders: [HTTPHeader("Content-Type", "application/json")], responseBody: answer,
                      method: method)
        }
        if case .object(var top) = log, case .object(var inner)? = top["log"] {
            inner["entries"] = .array(entries)
            top["log"] = .object(inner)
            log = .object(top)
        }
        return log
    }

    private static let flagsA = #"{"status_code":200,"response":{"flags":[{"key":"a","enabled":true,"rule_id":"r1","properties":{"p":"x"}}]}}"#
    private static let flagsB = #"{"status_code":200,"response":{"flags":[{"key":"a","enabled":false,"rule_id":"default"}]}}"#

    @Test func replayGivesEachMethodsAnswersInOrderThenTheLastAgain() throws {
        let recording = try Recording(har: har([("getFeatureFlags", 200, Self.flagsA), ("applicationOpen", 200, #"{"status_code":200}"#),
                                                ("getFeatureFlags", 503, "busy"), ("getFeatureFlags", 200, Self.flagsB)]))
        var state = EmulatorState(configuration: EmulatorConfiguration(replay: recording))
        func call(_ method: String) -> (Int, String) {
            let out = state.handle(EmulatorRequest(method: "POST", path: "/json/1.3/\(method)", body: body(["application": "APP-1", "hwid": "h"])),
                                   now: Date()).render()!
            return (out.status, String(decoding: out.body, as: UTF8.self))
        }
        #expect(call("getFeatureFlags") == (200, Self.flagsA))
        #expect(call("getFeatureFlags") == (503, "busy"))
        #expect(call("getFeatureFlags") == (200, Self.flagsB))
        #expect(call("getFeatureFlags") == (200, Self.flagsB))
        #expect(call("applicationOpen").0 == 200)
        #expect(call("registerUser") == (200, #"{"response":{},"status_code":200,"status_message":"OK"}"#))
        #expect(state.requestLog.select(method: nil, since: nil).count == 6)  // the lab still records every call
        state.reset()
        #expect(call("getFeatureFlags") == (200, Self.flagsA))
    }

    @Test func badRecordingsNameWhereTheyAreWrong() {
        #expect(throws: DefinitionError([.key("log"), .key("entries")], "missing (expected a HAR 1.2 log with entries)")) {
            try Recording(har: ["log": [:]])
        }
        #expect(throws: DefinitionError([.key("log"), .key("entries"), .index(0), .key("response"), .key("status")], "missing (expected a number)")) {
            try Recording(har: ["log": ["entries": [["request": ["url": "https://x/json/1.3/getFeatureFlags"]]]]])
        }
        #expect(throws: DefinitionError([.key("log"), .key("entries")], "no device API exchange to replay")) {
            try Recording(har: ["log": ["entries": []]])
        }
    }

    /// An impossible status is refused at load, naming the entry; it used to be accepted and trap
    /// (SIGILL) on the first call that replayed it.
    @Test(arguments: [(-5.0, "-5"), (4_294_967_296.0, "4294967296"), (1000.0, "1000"), (99.0, "99"), (200.5, "200.5"), (1e300, "1e+300")])
    func anImpossibleStatusIsRefusedNamingTheEntry(_ status: Double, _ shown: String) {
        var recorded = har([("applicationOpen", 200, "{}"), ("getFeatureFlags", 200, Self.flagsA)])
        if case .object(var top) = recorded, case .object(var log)? = top["log"], case .array(var entries)? = log["entries"],
           case .object(var entry) = entries[1], case .object(var response)? = entry["response"] {
            response["status"] = .number(status)
            entry["response"] = .object(response)
            entries[1] = .object(entry)
            log["entries"] = .array(entries)
            top["log"] = .object(log)
            recorded = .object(top)
        }
        #expect(throws: DefinitionError([.key("log"), .key("entries"), .index(1), .key("response"), .key("status")],
                                        "expected an HTTP status, a whole number 100-999, found \(shown)")) {
            try Recording(har: recorded)
        }
    }

    @Test func appsFromHARServeTheRecordedFlags() throws {
        let flags = #"{"status_code":200,"response":{"flags":[{"key":"on","enabled":true,"rule_id":"r_on","properties":{"n":5,"s":"x","b":true,"j":{"k":1}}},{"key":"killed","enabled":false,"rule_id":""},{"key":"off","enabled":false,"rule_id":"default"},{"key":"other","enabled":false,"rule_id":"r_off"}]}}"#
        let definition = try AppsFromHAR.definitions(har([("getFeatureFlags", 200, Self.flagsA), ("getFeatureFlags", 200, flags)]))
        var state = EmulatorState(apps: [try Application(json: definition)])
        let out = state.handle(EmulatorRequest(method: "POST", path: "/json/1.3/getFeatureFlags",
                                               body: body(["application": "APP-1", "hwid": "fresh", "userId": "anyone"])), now: Date())
        let served = try #require(out.render()?.jsonBody?["response"]?["flags"]?.arrayValue)
        var byKey: [String: JSONValue] = [:]
        for f in served { byKey[f["key"]!.stringValue!] = f }
        let recorded = try StrictJSONParser.parse(flags)["response"]!["flags"]!.arrayValue!
        for f in recorded {
            let key = f["key"]!.stringValue!
            #expect(byKey[key]?["enabled"] == f["enabled"], "\(key)")
            #expect(byKey[key]?["rule_id"] == f["rule_id"], "\(key)")
            #expect(byKey[key]?["properties"] ?? [:] == f["properties"] ?? [:], "\(key)")
        }
        #expect(throws: DefinitionError.self) { try AppsFromHAR.definitions(har([("applicationOpen", 200, "{}")])) }
    }
}
