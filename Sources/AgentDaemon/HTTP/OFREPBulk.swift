import AgentCore
import AgentPosix
import FoundationEssentials

/// `POST /ofrep/v1/evaluate/flags` for any number of flags without holding up the loop
/// (docs/http.md F.1): the answer is built from one snapshot of the served flags straight into
/// bytes, a slice at a time (`sliceSeconds`, the next slice after every descriptor has been
/// polled), with its ETag hashed as it grows; requests that come meanwhile wait for the same
/// build; the finished answer is kept until the served flags change, so later requests cost
/// nothing. Small sets (`incrementalAbove` flags or fewer) are built at once.
final class BulkAnswers {
    /// What the answer depends on: the flags themselves (compared as dictionaries, at no
    /// cost while the agent serves the very same ones: equal storage is equal at once; a
    /// device clock that stands still gives two refreshes one `receivedAt`), when they came
    /// and from where.
    struct Identity: Equatable {
        var flags: [String: FeatureFlag]
        var receivedAt: Date
        var source: FlagSource

        init(_ served: (snapshot: FlagSnapshot, source: FlagSource)) {
            flags = served.snapshot.flags
            receivedAt = served.snapshot.receivedAt
            source = served.source
        }
    }

    struct Built {
        let identity: Identity
        let body: [UInt8]
        let etag: String
        /// The 200 answer, one copy in libmicrohttpd for every client that gets it.
        let shared = SharedResponse()
    }

    static let incrementalAbove = 2_000
    static let sliceSeconds = 0.004

    private let loop: EventLoop
    private let served: () -> (snapshot: FlagSnapshot, source: FlagSource)?
    private(set) var cached: Built?
    private var job: Job?
    private var stepScheduled = false
    private var waiting: [(request: HTTPServerRequest, reply: (HTTPServerResponse) -> Void)] = []

    init(loop: EventLoop, served: @escaping () -> (snapshot: FlagSnapshot, source: FlagSource)?) {
        self.loop = loop
        self.served = served
    }

    /// The answer now, or nil when `reply` will get it (`reply` nil: built at once).
    func answer(_ request: HTTPServerRequest, reply: ((HTTPServerResponse) -> Void)?) -> HTTPServerResponse? {
        guard let current = served() else { return Self.response(OFREP.notReady(nil)) }
        let identity = Identity(current)
        if let cached, cached.identity == identity { return Self.response(request, cached) }
        guard let reply, current.snapshot.flags.count > Self.incrementalAbove else {
            var job = Job(current, identity)
            _ = job.run(until: .infinity, clock: { 0 })
            let built = job.finish()
            cached = built
            return Self.response(request, built)
        }
        waiting.append((request, reply))
        if job?.identity != identity { job = Job(current, identity) }
        scheduleStep()
        return nil
    }

    private func scheduleStep() {
        guard !stepScheduled else { return }
        stepScheduled = true
        loop.schedule(after: 0.000_001) { [weak self] in
            guard let self else { return }
            self.stepScheduled = false
            self.step()
        }
    }

    private func step() {
        guard var job else { return }
        self.job = nil
        let loop = self.loop
        guard job.run(until: loop.now + Self.sliceSeconds, clock: { loop.now }) else {
            self.job = job
            return scheduleStep()
        }
        let built = job.finish()
        // The flags changed while it was built: build again from the new ones.
        guard let current = served() else {
            return replyAll { _ in Self.response(OFREP.notReady(nil)) }
        }
        let identity = Identity(current)
        guard identity == built.identity else {
            self.job = Job(current, identity)
            return scheduleStep()
        }
        cached = built
        replyAll { Self.response($0, built) }
    }

    private func replyAll(_ response: (HTTPServerRequest) -> HTTPServerResponse) {
        let waiters = waiting
        waiting = []
        for waiter in waiters { waiter.reply(response(waiter.request)) }
    }

    // MARK: - Answers

    static func response(_ answer: OFREP.Answer) -> HTTPServerResponse {
        .json(answer.status, JSONValueBox(bytes: JSONWriter.encode(answer.body)))
    }

    static func response(_ request: HTTPServerRequest, _ built: Built) -> HTTPServerResponse {
        if let match = request.header("if-none-match"), HTTPInterface.matches(match, built.etag) {
            return HTTPServerResponse(status: 304, headers: [("ETag", built.etag)])
        }
        var answer = HTTPServerResponse.json(200, JSONValueBox(bytes: built.body), headers: [("ETag", built.etag)])
        answer.shared = built.shared
        return answer
    }
}

/// One build: every flag and every `KEY.P`, sorted by key, each as `OFREP.evaluate` answers
/// it (an exact flag key wins; the longest flag key first), written as `{"flags":[…]}`.
private struct Job {
    let identity: BulkAnswers.Identity
    let flags: [String: FeatureFlag]
    let source: FlagSource
    let fetchedAt: Date
    var sort: SlicedKeySort
    var keys: [String]?
    var index = 0
    var writer = JSONWriter(capacity: 1 << 16)
    var written = 0
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325

    init(_ served: (snapshot: FlagSnapshot, source: FlagSource), _ identity: BulkAnswers.Identity) {
        self.identity = identity
        flags = served.snapshot.flags
        source = served.source
        fetchedAt = served.snapshot.receivedAt
        sort = SlicedKeySort(served.snapshot.flags)
        writer.writeASCII(#"{"flags":["#)
    }

    /// Works until `deadline` (by `clock`); whether it is done.
    mutating func run(until deadline: Double, clock: () -> Double) -> Bool {
        if keys == nil {
            keys = sort.step(until: deadline, clock: clock)
            if keys == nil || clock() > deadline { return false }
        }
        guard let keys else { return true }
        while index < keys.count {
            let key = keys[index]
            index += 1
            if let item = item(key) {
                if writer.bytes.count > 10 { writer.bytes.append(UInt8(ascii: ",")) }
                writer.write(item)
            }
            if index & 63 == 0, clock() > deadline { break }
        }
        hashNew()
        return index == keys.count
    }

    private mutating func hashNew() {
        var h = hash
        for byte in writer.bytes[written...] {
            h ^= UInt64(byte)
            h = h &* 0x0000_0100_0000_01b3
        }
        hash = h
        written = writer.bytes.count
    }

    mutating func finish() -> BulkAnswers.Built {
        writer.writeASCII("]}")
        hashNew()
        let hex = String(hash, radix: 16)
        let etag = "\"" + String(repeating: "0", count: 16 - hex.count) + hex + "\""
        return BulkAnswers.Built(identity: identity, body: writer.bytes, etag: etag)
    }

    /// `OFREP.evaluate(key)`'s success body, from the snapshot; nil when that is not a 200.
    private func item(_ key: String) -> JSONValue? {
        if let flag = flags[key] { return success(key, .bool(flag.isEnabled), flag) }
        var end = key.endIndex
        while let dot = key[..<end].lastIndex(of: ".") {
            end = dot
            let flagKey = String(key[..<dot]), property = String(key[key.index(after: dot)...])
            guard !flagKey.isEmpty, !property.isEmpty, let flag = flags[flagKey] else { continue }
            guard let value = flag.properties[property] else { return nil }
            return success(key, value, flag)
        }
        return nil
    }

    private func success(_ key: String, _ value: JSONValue, _ flag: FeatureFlag) -> JSONValue {
        OFREP.success(key, value, flag, Provenance(reason: flag.reason, source: source, ageSeconds: nil), fetchedAt)
    }
}
