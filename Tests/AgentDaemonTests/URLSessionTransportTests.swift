import AgentCore
import AgentPosix
import Foundation
import Testing

/// The real transport (URLSession over libcurl) against the real emulator on loopback.
@Suite(.serialized) struct URLSessionTransportTests {
    final class Outcomes: @unchecked Sendable {
        private let semaphore = DispatchSemaphore(value: 0)
        private var value: HTTPOutcome?
        func set(_ v: HTTPOutcome) { value = v; semaphore.signal() }
        func wait() -> HTTPOutcome? { _ = semaphore.wait(timeout: .now() + 20); return value }
    }

    func send(_ method: PushwooshAPI.Method, to baseURL: String, token: String? = nil, timeout: Double = 5) -> HTTPOutcome? {
        let transport = URLSessionTransport(deliver: { work in DispatchQueue.global().async(execute: work) })
        let outcomes = Outcomes()
        let request = PushwooshAPI.request(method, baseURL: baseURL,
                                           common: .init(applicationCode: "ABCDE-12345", hwid: "HWID-1", userId: "alice"),
                                           apiToken: token, timeout: timeout)
        let box = LoopBound(outcomes)
        transport.send(request) { box.value.set($0) }
        return outcomes.wait()
    }

    @Test func fetchesFlagsFromTheEmulator() throws {
        let emulator = try EmulatorProcess()
        let outcome = try #require(send(.getFeatureFlags, to: emulator.serverURL, token: "t0k"))
        let success = try PushwooshAPI.classify(outcome).get()
        let flags = try PushwooshAPI.parseFlags(success.response).get()
        #expect(flags.flags["new_checkout"] != nil)
        #expect(flags.flags["legacy_onboarding"] == nil)  // archived (FF-7)
        // The request as the server saw it: headers and common fields (A.1).
        let (_, log) = emulator.admin("GET", "/admin/requests?method=getFeatureFlags")
        #expect(log.contains("Token t0k"))
        #expect(log.contains("\"hwid\":\"HWID-1\""))
        #expect(log.contains("7.2.10"))
    }

    // RF-7: a closed port is "no response" (code 0); an HTTP error keeps its status; Retry-After is read.
    @Test func failuresAreClassified() throws {
        let refused = try #require(send(.getFeatureFlags, to: "http://127.0.0.1:1/json/1.3/"))
        guard case .failure(let f) = PushwooshAPI.classify(refused) else { Issue.record("expected failure"); return }
        #expect(f.code == 0)
        let emulator = try EmulatorProcess()
        emulator.admin("POST", "/admin/faults", #"{"method":"getFeatureFlags","times":1,"http":503,"retryAfter":42}"#)
        let busy = try #require(send(.getFeatureFlags, to: emulator.serverURL))
        guard case .failure(let b) = PushwooshAPI.classify(busy) else { Issue.record("expected failure"); return }
        #expect(b.code == 503)
        #expect(b.retryAfter == 42)
        emulator.admin("POST", "/admin/faults", #"{"method":"getFeatureFlags","times":1,"body":"garbage"}"#)
        let garbage = try #require(send(.getFeatureFlags, to: emulator.serverURL))
        guard case .failure(let g) = PushwooshAPI.classify(garbage) else { Issue.record("expected failure"); return }
        #expect(g.code == 200)
        emulator.admin("POST", "/admin/faults", #"{"method":"getFeatureFlags","times":1,"delayMs":3000}"#)
        let slow = try #require(send(.getFeatureFlags, to: emulator.serverURL, timeout: 1))
        guard case .failure(let s) = PushwooshAPI.classify(slow) else { Issue.record("expected failure"); return }
        #expect(s.code == 0)  // timed out at the configured RequestTimeout
    }
}
