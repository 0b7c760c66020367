import AgentCore
import Foundation
import Testing
@testable import AgentDaemon

/// The network made once READY=1 is out: what the agent sends while starting is held, in
/// order, and goes out with its completion when the daemon opens it.
@Suite struct DeferredTransportTests {
    final class Recording: HTTPTransport {
        var sent: [(url: String, completion: (HTTPOutcome) -> Void)] = []
        func send(_ request: HTTPRequest, completion: @escaping (HTTPOutcome) -> Void) { sent.append((request.url, completion)) }
    }

    static func request(_ name: String) -> HTTPRequest {
        HTTPRequest(url: "http://127.0.0.1:1/json/1.3/" + name, headers: [], body: Data(), timeout: 5)
    }

    @Test func requestsBeforeOpenAreHeldInOrderAndSentOnce() {
        var made = 0
        let base = Recording()
        let deferred = DeferredTransport {
            made += 1
            return base
        }
        var answered: [String] = []
        deferred.send(Self.request("applicationOpen")) { _ in answered.append("applicationOpen") }
        deferred.send(Self.request("getFeatureFlags")) { _ in answered.append("getFeatureFlags") }
        #expect(made == 0)  // nothing of libcurl before open()
        deferred.open()
        #expect(made == 1)
        #expect(base.sent.map(\.url) == ["http://127.0.0.1:1/json/1.3/applicationOpen", "http://127.0.0.1:1/json/1.3/getFeatureFlags"])
        // Each held request keeps its own completion.
        base.sent[1].completion(.noResponse(reason: "test"))
        base.sent[0].completion(.noResponse(reason: "test"))
        #expect(answered == ["getFeatureFlags", "applicationOpen"])
        // After open, straight through; a second open makes nothing and resends nothing.
        deferred.send(Self.request("postEvent")) { _ in }
        deferred.open()
        #expect(made == 1)
        #expect(base.sent.count == 3)
    }
}
