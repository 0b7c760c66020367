import AgentCore
import AgentPosix
import FoundationEssentials

/// OFREP's change events (docs/http.md F.3, OpenFeature's ADR-0008): `GET /ofrep/v1/events`
/// is a `text/event-stream` on which every change of the served flags (a refresh that changed
/// any, expiry, a discard, a User ID switch) is one `refetchEvaluation` event carrying the
/// bulk answer's new `ETag`, and a comment line keeps quiet streams alive.
///
/// Changes are told by the ETag itself: after a change notification the bulk answer is built
/// (or taken from `BulkAnswers`' cache) and an event goes out when its ETag is not the one
/// last announced, so that an event's `etag` is, byte for byte, what a re-fetch gets. Streams
/// are ordinary HTTP connections (they count against `MaxConnections=`), at most
/// `maxStreams` at once; each holds at most `EventStream.maximumPendingBytes` unsent (a
/// reader that falls behind is cut).
final class OFREPEvents {
    static let path = "/ofrep/v1/events"
    /// OFREP's default, said explicitly: a provider whose application is inactive this long
    /// closes its stream.
    static let inactivityDelaySeconds = 120
    /// Seconds between keep-alive comments (at most 15, OFREP's providers' expectation).
    static let keepAliveSeconds = 10.0
    /// The bulk answer's `eventStreams` member (no origin: the provider's own base URL; no
    /// token in the URL: the stream takes the same `Authorization` as every OFREP request).
    static let bulkEventStreams: JSONValue = .array([.object([
        "type": "sse", "endpoint": .object(["requestUri": .string(path)]), "inactivityDelaySec": .number(Double(inactivityDelaySeconds)),
    ])])
    /// `bulkEventStreams` as the member the bulk answer's bytes begin with.
    static let bulkEventStreamsMember = #""eventStreams":"# + String(decoding: JSONWriter.encode(bulkEventStreams), as: UTF8.self)

    private let loop: EventLoop
    private let bulk: BulkAnswers
    /// Device time now, for the `lastModified` of an event that has no flags to date it.
    private let now: () -> Date
    let maxStreams: Int
    /// Seconds between keep-alive comments on every stream.
    let keepAliveSeconds: Double
    private var streams: [ObjectIdentifier: EventStream] = [:]
    private var keepAliveTimer: EventLoop.TimerHandle?
    /// The ETag last announced ("" for "no flags served"); nil: not known yet.
    private var announced: String?
    private var checkPending = false
    private(set) var eventsSent = 0
    private(set) var lastEventID = 0

    var openStreams: Int { streams.count }

    init(loop: EventLoop, bulk: BulkAnswers, maxStreams: Int, keepAliveSeconds: Double, now: @escaping () -> Date) {
        self.loop = loop
        self.bulk = bulk
        self.maxStreams = maxStreams
        self.keepAliveSeconds = keepAliveSeconds
        self.now = now
    }

    // MARK: - Opening a stream

    /// `GET /ofrep/v1/events` (authorized already): a stream, or 503 when `maxStreams` are open.
    func open() -> HTTPServerResponse {
        guard streams.count < maxStreams else {
            var refusal = HTTPInterface.errorBody(nil, code: "GENERAL",
                                                  details: "too many event streams (\(maxStreams) open); poll the bulk endpoint or retry later")
            refusal.bytes.append(0x0A)
            return .json(503, refusal, headers: [("Retry-After", "5")])
        }
        if streams.isEmpty { announced = currentETagIfKnown() }
        let stream = EventStream()
        let id = ObjectIdentifier(stream)
        stream.onEnd = { [weak self] in
            guard let self else { return }
            self.streams[id] = nil
            if self.streams.isEmpty, let timer = self.keepAliveTimer {
                self.loop.cancel(timer)
                self.keepAliveTimer = nil
            }
        }
        streams[id] = stream
        // A first comment, so that the provider sees the stream open at once.
        stream.write(Array(": ofrep events; a refetchEvaluation on every change of the flags\n\n".utf8))
        if keepAliveTimer == nil { scheduleKeepAlive() }
        return HTTPServerResponse(status: 200, headers: [("Content-Type", "text/event-stream"), ("Cache-Control", "no-store"),
                                                         ("X-Accel-Buffering", "no")],
                                  stream: stream)
    }

    /// The ETag of the answer the bulk endpoint gives now, if it is built already ("" when
    /// no flags are served).
    private func currentETagIfKnown() -> String? {
        switch bulk.current(later: nil) {
        case .now(let built): built?.etag ?? ""
        case .later: nil
        }
    }

    private func scheduleKeepAlive() {
        keepAliveTimer = loop.schedule(after: keepAliveSeconds) { [weak self] in
            guard let self else { return }
            self.keepAliveTimer = nil
            guard !self.streams.isEmpty else { return }
            let comment = Array(": keep-alive\n\n".utf8)
            for stream in self.streams.values { stream.write(comment) }
            self.scheduleKeepAlive()
        }
    }

    // MARK: - Changes

    /// The served flags may have changed (a `flagsChanged` notification): once the loop is
    /// free, the bulk answer is built and, if its ETag is new, announced.
    func flagsMayHaveChanged() {
        guard !streams.isEmpty, !checkPending else { return }
        checkPending = true
        loop.schedule(after: 0) { [weak self] in
            guard let self else { return }
            self.checkPending = false
            guard !self.streams.isEmpty else { return }
            switch self.bulk.current(later: { [weak self] in self?.announce($0) }) {
            case .now(let built): self.announce(built)
            case .later: break
            }
        }
    }

    private func announce(_ built: BulkAnswers.Built?) {
        let etag = built?.etag ?? ""
        guard etag != announced else { return }
        announced = etag
        guard !streams.isEmpty else { return }
        lastEventID += 1
        let event = Self.event(id: lastEventID, etag: built?.etag,
                               lastModified: built?.identity.receivedAt ?? now())
        for stream in streams.values { stream.write(event) }
        eventsSent += streams.count
    }

    /// One event as its bytes: `event: message`, `id: N`, `data: {"type":"refetchEvaluation",
    /// "etag": ETAG, "lastModified": UNIX-SECONDS}` (no `etag` when no flags are served: the
    /// bulk answer then has none).
    static func event(id: Int, etag: String?, lastModified: Date) -> [UInt8] {
        var data: [String: JSONValue] = ["type": .string("refetchEvaluation"),
                                         "lastModified": .number(Double(max(0, Int(lastModified.timeIntervalSince1970.rounded(.down)))))]
        if let etag { data["etag"] = .string(etag) }
        var bytes = Array("event: message\nid: \(id)\ndata: ".utf8)
        bytes += JSONWriter.encode(.object(data))
        bytes += Array("\n\n".utf8)
        return bytes
    }

    /// The HTTP interface stops: every stream ends.
    func stop() {
        if let keepAliveTimer { loop.cancel(keepAliveTimer) }
        keepAliveTimer = nil
        for stream in streams.values { stream.finish() }
    }
}
