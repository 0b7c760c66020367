import AgentCore
import AgentPosix
import AgentTestSupport
import Foundation
import Testing
@testable import AgentDaemon

/// docs/http.md F's routes in-process: `HTTPInterface.respond` over an agent serving stored
/// flags, without libmicrohttpd, a socket or a daemon process (the real server's tests,
/// HTTPInterfaceTests, keep the wire: keep-alive, limits, socket activation).
@Suite struct HTTPRouteTests {
    /// A transport whose requests never come back: the agent serves what it loaded.
    final class Silent: HTTPTransport {
        var pending: [(HTTPOutcome) -> Void] = []
        func send(_ request: HTTPRequest, completion: @escaping (HTTPOutcome) -> Void) { pending.append(completion) }
    }

    /// Keeps the loop (never run: timers are only registered), host and agent alive.
    final class Routes {
        let loop: EventLoop
        let host: AgentOnLoop
        let metrics = Metrics()
        let interface: HTTPInterface

        init(flags: [FeatureFlag]?, token: String? = nil) throws {
            loop = try EventLoop()
            let clock = DeviceClock(base: SystemClock(), mode: .system)
            var state = PersistentState(hwid: "H")
            state.flags = flags.map { list in
                FlagSnapshot(flags: Dictionary(uniqueKeysWithValues: list.map { ($0.key, $0) }), receivedAt: clock.wall.addingTimeInterval(-60),
                             applicationCode: "ABCDE-12345", userId: "H")
            }
            host = AgentOnLoop(loop: loop, clock: clock, settings: VirtualLoop.defaultSettings(), transport: Silent(),
                               store: MemoryStore(committed: state))
            host.agent.start()
            interface = HTTPInterface(host: host, metrics: metrics, token: token.map { Array($0.utf8) }, metricsText: { "# metrics\n" })
        }

        func call(_ method: String, _ path: String, _ body: String = "", headers: [(name: String, value: String)] = [],
                  tooLarge: Bool = false) -> (status: Int, json: JSONValue?, headers: [(name: String, value: String)]) {
            var request = HTTPServerRequest(method: method, path: path, headers: headers.map { HTTPHeader($0.name, $0.value) }, body: Array(body.utf8))
            request.bodyTooLarge = tooLarge
            let r = interface.respond(request)
            return (r.status, try? JSONReader.parse(r.body), r.headers)
        }
    }

    static let flags = [FeatureFlag(key: "new_checkout", isEnabled: true, ruleId: "r_qa", properties: ["max_items": 5]),
                        FeatureFlag(key: "promo", isEnabled: false, ruleId: "default")]

    @Test func healthAndReadiness() throws {
        let served = try Routes(flags: Self.flags)
        #expect(served.call("GET", "/healthz").json == ["status": "ok"])
        #expect(served.call("HEAD", "/healthz").status == 200)
        let post = served.call("POST", "/healthz")
        #expect(post.status == 405 && post.headers.contains { $0 == ("Allow", "GET, HEAD") })
        let ready = served.call("GET", "/readyz")
        #expect(ready.status == 200 && ready.json?["flagsCount"] == 2)
        #expect(try Routes(flags: nil).call("GET", "/readyz").status == 503)
        #expect(served.call("GET", "/nowhere").status == 404)
        #expect(served.metrics.httpRequests[405] == 1 && served.metrics.httpRequests[404] == 1)
    }

    /// F.1: one flag, a property by KEY.PROPERTY, a missing key, no flags at all.
    @Test func ofrepEvaluations() throws {
        let served = try Routes(flags: Self.flags)
        let flag = served.call("POST", "/ofrep/v1/evaluate/flags/new_checkout", #"{"context":{}}"#)
        #expect(flag.status == 200 && flag.json?["value"] == true && flag.json?["reason"] == "TARGETING_MATCH")
        #expect(served.call("POST", "/ofrep/v1/evaluate/flags/new_checkout.max_items", #"{"context":{}}"#).json?["value"] == 5)
        let missing = served.call("POST", "/ofrep/v1/evaluate/flags/nope", #"{"context":{}}"#)
        #expect(missing.status == 404 && missing.json?["errorCode"] == "FLAG_NOT_FOUND")
        #expect(served.call("GET", "/ofrep/v1/evaluate/flags/new_checkout").status == 405)
        #expect(try Routes(flags: nil).call("POST", "/ofrep/v1/evaluate/flags/new_checkout", #"{"context":{}}"#).json?["errorCode"] == "PROVIDER_NOT_READY")
    }

    /// The request is `{"context": {…}}` as the OFREP schema has it, on both routes: a body
    /// that is missing or not an object is PARSE_ERROR, a context that is missing or not an
    /// object or a targetingKey that is not a string (or not the agent's user) INVALID_CONTEXT;
    /// an empty context, or one without a targetingKey, is served.
    @Test(arguments: [
        ("", 400, "PARSE_ERROR"), (" \n", 400, "PARSE_ERROR"), ("null", 400, "PARSE_ERROR"), ("[]", 400, "PARSE_ERROR"),
        ("{", 400, "PARSE_ERROR"), ("{}", 400, "INVALID_CONTEXT"), (#"{"context":null}"#, 400, "INVALID_CONTEXT"),
        (#"{"context":[]}"#, 400, "INVALID_CONTEXT"), (#"{"context":{"targetingKey":null}}"#, 400, "INVALID_CONTEXT"),
        (#"{"context":{"targetingKey":7}}"#, 400, "INVALID_CONTEXT"), (#"{"context":{"targetingKey":"mallory"}}"#, 400, "INVALID_CONTEXT"),
        (#"{"context":{}}"#, 200, nil), (#"{"context":{"targetingKey":"H","plan":"gold"}}"#, 200, nil),
        (#"{"context":{"plan":"gold"},"extra":1}"#, 200, nil),
    ] as [(String, Int, String?)])
    func requestShape(_ body: String, _ status: Int, _ code: String?) throws {
        let served = try Routes(flags: Self.flags)
        for path in ["/ofrep/v1/evaluate/flags/new_checkout", "/ofrep/v1/evaluate/flags"] {
            let answer = served.call("POST", path, body)
            #expect(answer.status == status, "\(path) \(body)")
            #expect(answer.json?["errorCode"]?.stringValue == code, "\(path) \(body)")
            if code != nil { #expect(answer.json?["errorDetails"]?.stringValue?.isEmpty == false) }
        }
    }

    /// F.1 bulk: every flag and property, with an ETag; the same ETag back is 304.
    @Test func bulkEvaluationWithETag() throws {
        let served = try Routes(flags: Self.flags)
        let all = served.call("POST", "/ofrep/v1/evaluate/flags", #"{"context":{}}"#)
        let keys = all.json?["flags"]?.arrayValue?.compactMap { $0["key"]?.stringValue }
        #expect(keys == ["new_checkout", "new_checkout.max_items", "promo"])
        let etag = all.headers.first { $0.name == "ETag" }?.value
        #expect(etag != nil)
        #expect(served.call("POST", "/ofrep/v1/evaluate/flags", #"{"context":{}}"#, headers: [("if-none-match", etag ?? "")]).status == 304)
        #expect(served.call("POST", "/ofrep/v1/evaluate/flags", #"{"context":{}}"#, headers: [("if-none-match", "\"other\"")]).status == 200)
    }

    /// F: the token, an oversized body, a malformed body: errors in OFREP's shape.
    @Test func tokenBodyLimitAndBadBodies() throws {
        let guarded = try Routes(flags: Self.flags, token: "s3cret")
        let none = guarded.call("GET", "/healthz")
        #expect(none.status == 401 && none.headers.contains { $0 == ("WWW-Authenticate", "Bearer") })
        #expect(guarded.call("GET", "/healthz", headers: [("authorization", "Bearer s3cret")]).status == 200)
        #expect(guarded.call("GET", "/healthz", headers: [("x-api-key", "s3cret")]).status == 200)
        #expect(guarded.call("GET", "/healthz", headers: [("authorization", "Bearer s3cre")]).status == 401)
        // Every credential carried must be right: a wrong one beside the right one is refused.
        #expect(guarded.call("GET", "/healthz", headers: [("authorization", "Bearer s3cret"), ("x-api-key", "s3cre")]).status == 401)
        #expect(guarded.call("GET", "/healthz", headers: [("authorization", "Basic czNjcmV0"), ("x-api-key", "s3cret")]).status == 401)
        #expect(guarded.call("GET", "/healthz", headers: [("authorization", "Bearer s3cret"), ("x-api-key", "s3cret")]).status == 200)
        let big = guarded.call("POST", "/ofrep/v1/evaluate/flags", tooLarge: true)
        #expect(big.status == 413 && big.headers.contains { $0 == ("Connection", "close") })
        let bad = try Routes(flags: Self.flags).call("POST", "/ofrep/v1/evaluate/flags/new_checkout", "{not json")
        #expect(bad.status == 400 && bad.json?["errorCode"] == "PARSE_ERROR")
    }
}
