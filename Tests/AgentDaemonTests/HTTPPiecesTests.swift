import AgentCore
@testable import AgentDaemon
import Testing

/// The pure pieces of docs/http.md F: ETags and If-None-Match, tokens, the Prometheus text.
@Suite struct HTTPPiecesTests {
    @Test func etagIsStrongAndFollowsTheBytes() {
        let a = HTTPInterface.etag(Array(#"{"flags":[]}"#.utf8))
        #expect(a.count == 18 && a.hasPrefix("\"") && a.hasSuffix("\""))
        #expect(HTTPInterface.etag(Array(#"{"flags":[]}"#.utf8)) == a)
        #expect(HTTPInterface.etag(Array(#"{"flags":[1]}"#.utf8)) != a)
    }

    @Test func ifNoneMatch() {
        let tag = "\"00ff00ff00ff00ff\""
        #expect(HTTPInterface.matches(tag, tag))
        #expect(HTTPInterface.matches("W/" + tag, tag))
        #expect(HTTPInterface.matches("\"x\", " + tag, tag))
        #expect(HTTPInterface.matches("*", tag))
        #expect(!HTTPInterface.matches("\"x\"", tag))
        #expect(!HTTPInterface.matches("00ff00ff00ff00ff", tag))
    }

    @Test func tokens() {
        let token = Array("s3cret".utf8)
        func request(_ headers: [(name: String, value: String)]) -> HTTPServerRequest {
            HTTPServerRequest(method: "GET", path: "/metrics", headers: headers.map { HTTPHeader($0.name, $0.value) }, body: [])
        }
        #expect(HTTPInterface.authorized(request([("authorization", "Bearer s3cret")]), token: token))
        #expect(HTTPInterface.authorized(request([("authorization", "bearer  s3cret ")]), token: token))
        #expect(HTTPInterface.authorized(request([("x-api-key", "s3cret")]), token: token))
        #expect(!HTTPInterface.authorized(request([("authorization", "Token s3cret")]), token: token))
        #expect(!HTTPInterface.authorized(request([("authorization", "Bearer s3cre")]), token: token))
        #expect(!HTTPInterface.authorized(request([("x-api-key", "s3cret2")]), token: token))
        #expect(!HTTPInterface.authorized(request([]), token: token))
    }

    @Test func prometheusText() {
        var text = PrometheusText()
        text.family("m_total", "counter", "a \\ help\nline")
        text.sample("m_total", [("a", "q\"b\\c\nd")], 3)
        text.sample("m_total", [], .nan)
        text.sample("m_total", [], 0.25)
        text.sample("m_total", [], .infinity)
        #expect(text.text == """
            # HELP m_total a \\\\ help\\nline
            # TYPE m_total counter
            m_total{a="q\\"b\\\\c\\nd"} 3
            m_total NaN
            m_total 0.25
            m_total +Inf

            """)
    }

    @Test func processMetricsAreRead() {
        let m = ProcessMetrics.read()
        #expect((m.cpuSeconds ?? -1) >= 0)
        #expect((m.residentBytes ?? 0) > 1_000_000)
        #expect((m.openFDs ?? 0) >= 3)
        #expect((m.maxFDs ?? 0) >= (m.openFDs ?? 0))
        #expect((m.startTime ?? 0) > 1_600_000_000)
    }
}
