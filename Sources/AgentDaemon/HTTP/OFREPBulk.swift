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
    /// Who waits for the build under way (an HTTP answer, the change events).
    private var waiting: [(Built?) -> Void] = []

    init(loop: EventLoop, served: @escaping () -> (snapshot: FlagSnapshot, source: FlagSource)?) {
        self.loop = loop
        self.served = served
    }

    /// The answer now, or nil when `reply` will get it (`reply` nil: built at once).
    func answer(_ request: HTTPServerRequest, reply: ((HTTPServerResponse) -> Void)?) -> HTTPServerResponse? {
        switch current(later: reply.map { reply in { reply(Self.response(request, $0)) } }) {
        case .now(let built): Self.response(request, built)
        case .later: nil
        }
    }

    /// What `current` gives: the build of the flags served now (nil: none are served), or
    /// word that `later` will get it.
    enum Current {
        case now(Built?)
        case later
    }

    /// The build of the served flags: the kept one while they are unchanged, else built at
    /// once (small sets, or `later` nil) or a slice at a time, `later` called when done.
    func current(later: ((Built?) -> Void)?) -> Current {
        guard let current = served() else { return .now(nil) }
        let identity = Identity(current)
        if let cached, cached.identity == identity { return .now(cached) }
        guard let later, current.snapshot.flags.count > Self.incrementalAbove else {
            var job = Job(current, identity)
            _ = job.run(until: .infinity, clock: { 0 })
            let built = job.finish()
            cached = built
            return .now(built)
        }
        waiting.append(later)
        if job?.identity != identity { job = Job(current, identity) }
        scheduleStep()
        return .later
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
        guard let current = served() else { return finishAll(nil) }
        let identity = Identity(current)
        guard identity == built.identity else {
            self.job = Job(current, identity)
            return scheduleStep()
        }
        cached = built
        finishAll(built)
    }

    private func finishAll(_ built: Built?) {
        let waiters = waiting
        waiting = []
        for waiter in waiters { waiter(built) }
    }

    // MARK: - Answers

    static func response(_ answer: OFREP.Answer) -> HTTPServerResponse {
        .json(answer.status, JSONValueBox(bytes: JSONWriter.encode(answer.body)))
    }

    /// The answer to `request` from `built` (nil: no flags are served, docs/http.md F.1's
    /// not-ready answer).
    static func response(_ request: HTTPServerRequest, _ built: Built?) -> HTTPServerResponse {
        guard let built else { return response(OFREP.notReady(nil)) }
        if let match = request.header("if-none-match"), HTTPInterface.matches(match, built.etag) {
            return HTTPServerResponse(status: 304, headers: [("ETag", built.etag)])
        }
        var answer = HTTPServerResponse.json(200, JSONValueBox(bytes: built.body), headers: [("ETag", built.etag)])
        answer.shared = built.shared
        return answer
    }
}

/// One build: every flag and every `KEY.P`, sorted by key, each as `OFREP.evaluate` answers
/// it (an exact flag key wins; the longest flag key first), written as
/// `{"eventStreams":[…],"flags":[…]}` (keys sorted as the project's writer sorts them;
/// docs/http.md F.3).
private struct Job {
    let identity: BulkAnswers.Identity
    let flags: [String: FeatureFlag]
    let source: FlagSource
    let fetchedAt: Date
    var sort: SlicedKeySort
    var keys: [String]?
    var index = 0
    /// Where the first item goes (after `{"eventStreams":[…],"flags":[`).
    var itemsStart = 0
    var writer = JSONWriter(capacity: 1 << 16)
    var written = 0
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325

    init(_ served: (snapshot: FlagSnapshot, source: FlagSource), _ identity: BulkAnswers.Identity) {
        self.identity = identity
        flags = served.snapshot.flags
        source = served.source
        fetchedAt = served.snapshot.receivedAt
        sort = SlicedKeySort(served.snapshot.flags)
        writer.writeASCII("{" + OFREPEvents.bulkEventStreamsMember + #","flags":["#)
        itemsStart = writer.bytes.count
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
                if writer.bytes.count > itemsStart { writer.bytes.append(UInt8(ascii: ",")) }
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
