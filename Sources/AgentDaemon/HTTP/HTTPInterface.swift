import AgentCore
import AgentWire
import FoundationEssentials

/// The routes of docs/http.md F: OFREP evaluation (F.1), `/healthz`, `/readyz`, `/metrics`
/// (F.2), OFREP's change events (F.3). Nothing here changes state: there is no route but the
/// evaluations and the four GETs.
final class HTTPInterface {
    private let host: AgentOnLoop
    private let metrics: Metrics
    private let metricsText: () -> String
    /// The token requests must carry; nil: none needed.
    var token: [UInt8]?

    static let single = "/ofrep/v1/evaluate/flags/"
    static let bulk = "/ofrep/v1/evaluate/flags"

    /// The bulk answer, built without holding up the loop and kept until the flags change.
    let bulkAnswers: BulkAnswers
    /// `GET /ofrep/v1/events`' streams.
    let events: OFREPEvents

    init(host: AgentOnLoop, metrics: Metrics, token: [UInt8]?, maxEventStreams: Int = 128,
         keepAliveSeconds: Double = OFREPEvents.keepAliveSeconds, metricsText: @escaping () -> String) {
        self.host = host
        self.metrics = metrics
        self.token = token
        self.metricsText = metricsText
        bulkAnswers = BulkAnswers(loop: host.loop) { [unowned host] in host.agent.servedSnapshot() }
        events = OFREPEvents(loop: host.loop, bulk: bulkAnswers, maxStreams: maxEventStreams, keepAliveSeconds: keepAliveSeconds,
                             now: { [unowned host] in host.clock.wall })
    }

    /// The answer now (a bulk answer is built at once).
    func respond(_ request: HTTPServerRequest) -> HTTPServerResponse {
        respond(request, reply: nil)!
    }

    /// The answer now, or nil when `reply` gets it later (a bulk answer over many flags).
    func respond(_ request: HTTPServerRequest, reply: ((HTTPServerResponse) -> Void)?) -> HTTPServerResponse? {
        let metrics = self.metrics
        guard let response = route(request, reply: reply.map { reply in
            { response in
                metrics.httpRequest(status: response.status)
                reply(response)
            }
        }) else { return nil }
        metrics.httpRequest(status: response.status)
        return response
    }

    private func route(_ request: HTTPServerRequest, reply: ((HTTPServerResponse) -> Void)?) -> HTTPServerResponse? {
        if request.bodyTooLarge {
            return .json(413, Self.errorBody(nil, code: "GENERAL", details: "request body larger than \(HTTPSettings.maximumBodyBytes) bytes"),
                         headers: [("Connection", "close")])
        }
        if let token, !Self.authorized(request, token: token) {
            return .json(401, Self.errorBody(nil, code: "GENERAL", details: "missing or wrong token (Authorization: Bearer TOKEN or X-API-Key: TOKEN)"),
                         headers: [("WWW-Authenticate", "Bearer")])
        }
        let path = request.path
        if let problem = request.unreadablePath {
            let key = path.hasPrefix(Self.single) ? String(path.dropFirst(Self.single.count)) : nil
            return .json(400, Self.errorBody(key, code: "GENERAL", details: problem), headers: [("Connection", "close")])
        }
        switch path {
        case "/healthz":
            return only(["GET", "HEAD"], request) { .json(200, JSONValueBox(bytes: JSONWriter.encode(["status": "ok"]))) }
        case "/readyz":
            return only(["GET", "HEAD"], request) {
                let status = host.agent.status()
                let ready = status.state == .ready || status.state == .stale
                return .json(ready ? 200 : 503, JSONValueBox(bytes: JSONWriter.encode(StatusAnswer(version: StatusReport.version, status: status).json)))
            }
        case "/metrics":
            return only(["GET", "HEAD"], request) {
                HTTPServerResponse(status: 200, headers: [("Content-Type", "text/plain; version=0.0.4; charset=utf-8")],
                                   body: Array(metricsText().utf8))
            }
        case OFREPEvents.path:
            return only(["GET"], request) { events.open() }
        case Self.bulk, Self.bulk + "/":
            guard request.method == "POST" else { return only(["POST"], request) { preconditionFailure() } }
            if let rejection = OFREP.checkRequest(request.body, key: nil, agent: host.agent) {
                return .json(rejection.status, JSONValueBox(bytes: JSONWriter.encode(rejection.body)))
            }
            return bulkAnswers.answer(request, reply: reply)
        default:
            if path.hasPrefix(Self.single) {
                let key = String(path.dropFirst(Self.single.count))
                return only(["POST"], request) {
                    let answer = OFREP.evaluate(key, body: request.body, agent: host.agent)
                    return .json(answer.status, JSONValueBox(bytes: JSONWriter.encode(answer.body)))
                }
            }
            return .json(404, Self.errorBody(nil, code: "GENERAL", details: "no such path: \(path)"))
        }
    }

    private func only(_ methods: [String], _ request: HTTPServerRequest, _ body: () -> HTTPServerResponse) -> HTTPServerResponse {
        guard methods.contains(request.method) else {
            return .json(405, Self.errorBody(nil, code: "GENERAL", details: "method \(request.method) not allowed; use \(methods.joined(separator: " or "))"),
                         headers: [("Allow", methods.joined(separator: ", "))])
        }
        return body()
    }

    // MARK: - Pieces

    static func errorBody(_ key: String?, code: String, details: String) -> JSONValueBox {
        JSONValueBox(bytes: JSONWriter.encode(OFREP.failure(key, code, details)))
    }

    /// A strong ETag: FNV-1a (64 bits) of the body, which holds no value that changes with
    /// the clock, so it changes exactly when the served flags do.
    static func etag(_ bytes: [UInt8]) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        let hex = String(hash, radix: 16)
        return "\"" + String(repeating: "0", count: 16 - hex.count) + hex + "\""
    }

    /// `If-None-Match`: `*` or a list of tags (compared weakly, RFC 9110 13.1.2).
    static func matches(_ header: String, _ etag: String) -> Bool {
        for part in header.split(separator: ",") {
            var tag = part.trimmingOptionalWhitespace()
            if tag == "*" { return true }
            if tag.hasPrefix("W/") { tag.removeFirst(2) }
            if tag == etag { return true }
        }
        return false
    }

    /// `Authorization: Bearer TOKEN` or `X-API-Key: TOKEN`, compared in constant time. Every
    /// credential the request carries must be right: a wrong one beside a right one is refused.
    static func authorized(_ request: HTTPServerRequest, token: [UInt8]) -> Bool {
        var candidates: [String] = []
        if let auth = request.header("authorization") { candidates.append(BearerToken.from(authorization: auth) ?? "") }
        if let key = request.header("x-api-key") { candidates.append(key.trimmingOptionalWhitespace()) }
        var right = !candidates.isEmpty
        for candidate in candidates where !BearerToken.matches(candidate, token) { right = false }
        return right
    }
}
