import AgentCore
import AgentTestSupport
import Foundation
import Testing

/// RF-7: every kind of unusable server answer gets its own message, naming the JSON path of
/// what is wrong and what was found there (the refresh error's message, in `status` and
/// the `refresh` answer).
@Suite struct ServerAnswerTests {
    /// The message a flags request's answer `body` (HTTP 200) fails with; nil when usable.
    static func failure(_ body: String) -> String? {
        switch PushwooshAPI.classify(.response(status: 200, headers: [:], body: Data(body.utf8))) {
        case .failure(let f):
            #expect(f.code == 200 && !f.retryable)
            return f.message
        case .success(let s):
            guard case .failure(let f) = PushwooshAPI.parseFlags(s.response) else { return nil }
            #expect(f.code == 200 && !f.retryable)
            return f.message
        }
    }

    static let ok = #""status_code":200,"status_message":"OK""#

    @Test("RF-7: each kind of bad answer has its own message naming the JSON path", arguments: [
        ("", "answer is not JSON: empty input at byte 0 (0 bytes)"),
        ("<html>502</html>", "answer is not JSON: "),
        (#"{"status_code":200"#, "answer is not JSON: "),
        (#"[{"status_code":200}]"#, "answer is JSON but not an object: found an array of 1"),
        (#""OK""#, #"answer is JSON but not an object: found a string "OK""#),
        (#"{"response":{}}"#, "status_code is missing"),
        (#"{"status_code":null,"response":{}}"#, "status_code is missing"),
        (#"{"status_code":"200","response":{}}"#, #"status_code is not a number: found a string "200""#),
        (#"{"status_code":true,"response":{}}"#, "status_code is not a number: found true"),
        (#"{"status_code":210,"status_message":"Application not found"}"#, "status_code 210: Application not found"),
        ("{\(ok)}", "unusable flags response: response is missing (absent or null)"),
        ("{\(ok),\"response\":null}", "unusable flags response: response is missing (absent or null)"),
        ("{\(ok),\"response\":[]}", "unusable flags response: response is not an object: found an array of 0"),
        ("{\(ok),\"response\":{\"partial\":\"no\"}}", #"unusable flags response: response.partial is not a boolean: found a string "no""#),
        ("{\(ok),\"response\":{\"flags\":{}}}", "unusable flags response: response.flags is not an array: found an object"),
        ("{\(ok),\"response\":{\"flags\":\"none\"}}", #"unusable flags response: response.flags is not an array: found a string "none""#),
        ("{\(ok),\"response\":{\"flags\":[{\"key\":\"a\",\"enabled\":true},7]}}", "unusable flags response: response.flags[1] is not an object: found a number 7"),
        ("{\(ok),\"response\":{\"flags\":[{\"enabled\":true}]}}", "unusable flags response: response.flags[0].key is missing"),
        ("{\(ok),\"response\":{\"flags\":[{\"key\":12,\"enabled\":true}]}}", "unusable flags response: response.flags[0].key is not a string: found a number 12"),
        ("{\(ok),\"response\":{\"flags\":[{\"key\":\"k\"}]}}", "unusable flags response: response.flags[0].enabled is missing (flag k)"),
        ("{\(ok),\"response\":{\"flags\":[{\"key\":\"k\",\"enabled\":1}]}}", "unusable flags response: response.flags[0].enabled is not a boolean: found a number 1"),
        ("{\(ok),\"response\":{\"flags\":[{\"key\":\"k\",\"enabled\":\"true\"}]}}", #"unusable flags response: response.flags[0].enabled is not a boolean: found a string "true""#),
    ])
    func messages(body: String, expected: String) {
        let message = Self.failure(body)
        #expect(message?.hasPrefix(expected) == true, "\(message ?? "usable")")
    }

    @Test("A long string found is cut short in the message")
    func longValuesAreExcerpted() {
        let long = String(repeating: "x", count: 500)
        let message = Self.failure("{\"status_code\":\"\(long)\"}")
        #expect(message == #"status_code is not a number: found a string "xxxxxxxxxxxxxxxxxxxxxxxx…""#)
    }

    @Test("Usable answers stay usable: no flags, null flags, partial null")
    func usableAnswers() {
        #expect(Self.failure("{\(Self.ok),\"response\":{}}") == nil)
        #expect(Self.failure("{\(Self.ok),\"response\":{\"flags\":null,\"partial\":null}}") == nil)
        #expect(Self.failure("{\(Self.ok),\"response\":{\"flags\":[{\"key\":\"k\",\"enabled\":false,\"rule_id\":\"\"}]}}") == nil)
    }

    @Test("RF-7: the message reaches status.lastRefreshError")
    func messageReachesStatus() {
        var settings = VirtualLoop.defaultSettings()
        settings.flags.disableThrottle = true
        let loop = VirtualLoop.serving([], settings: settings)
        loop.failFlags(with: ScriptedTransport.envelope(["status_code": 200, "response": ["flags": [["key": "k", "enabled": "yes"]]]]))
        _ = loop.refreshAndWait()
        #expect(loop.agent.status().lastRefreshError?.message
                == #"unusable flags response: response.flags[0].enabled is not a boolean: found a string "yes""#)
    }
}
