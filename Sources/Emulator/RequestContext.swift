import AgentCore
import EmulatorCore
import MicroHTTPD
import Synchronization

/// What a request may carry: the admin token and a body over its route's limit are checked
/// on the headers, before the body is read; the body's pieces count in the budget shared
/// by all connections.
extension EmulatorServer {
    /// The first call for a request (the headers are in, the body not read yet): an admin
    /// request without the token and a body announced over the limit are answered now.
    func begin(_ connection: OpaquePointer, url: UnsafePointer<CChar>,
               conCls: UnsafeMutablePointer<UnsafeMutableRawPointer?>) -> MHD_Result {
        let ctx = RequestContext(budget: bodies)
        conCls.pointee = Unmanaged.passRetained(ctx).toOpaque()
        let path = String(cString: url)
        ctx.limit = EmulatorConfiguration.maxBodyBytes(path: path)
        let headers = Self.values(connection, MHD_ValueKind.HEADER_KIND)
        var early: EmulatorResponse?
        if !configuration.authorized(path: path, headers: headers) {
            early = EmulatorConfiguration.unauthorized.render()
        } else if let length = headers.value(named: "content-length").flatMap({ Int($0) }),
                  length > ctx.limit {
            early = Self.tooLarge(ctx.limit)
        }
        guard let early else { return MHD_Result.YES }
        connections.busy(Self.key(connection))
        ctx.refused = true
        return send(early, .normal, on: connection)
    }

    /// A piece of the body: kept, unless it takes the body over its limit or the budget.
    func receive(_ ctx: RequestContext, _ data: UnsafePointer<CChar>?, count n: Int) {
        if ctx.body.count + n > ctx.limit {
            ctx.tooLarge = true
        } else if !ctx.reserve(n) {
            ctx.overBudget = true
        } else if let data {
            data.withMemoryRebound(to: UInt8.self, capacity: n) { ctx.append(UnsafeBufferPointer(start: $0, count: n)) }
        }
    }

    /// The answer to a body that ended over a limit (413) or the budget (503); nil when it fits.
    func refusal(_ ctx: RequestContext) -> EmulatorResponse? {
        if ctx.tooLarge { return Self.tooLarge(ctx.limit) }
        guard ctx.overBudget else { return nil }
        ctx.releaseBody()
        return .json(503, .object(["error": .string("request bodies in flight exceed \(BodyBudget.limit) bytes; try again")]))
    }

    static func tooLarge(_ limit: Int) -> EmulatorResponse {
        .json(413, .object(["error": .string("body larger than \(limit) bytes")]))
    }
}

enum Pending {
    case respond(EmulatorResponse, Outcome.Delivery)
    case drop
    case reset
    /// A parked wait: its answer is in `Runtime.answers` under this connection key.
    case parked(UInt)
}

/// Per-request state kept in libmicrohttpd's `con_cls`; touched only by the
/// thread that serves the connection (never by the delay timer).
final class RequestContext {
    private(set) var body: [UInt8] = []
    private let budget: BodyBudget
    /// Bytes of `body` counted in `budget`.
    private var reserved = 0
    var tooLarge = false
    /// The largest body this request may carry (its route's).
    var limit = EmulatorConfiguration.maxDeviceBodyBytes
    /// Answered at the headers (no token, or a body announced over the limit).
    var refused = false
    var pending: Pending?
    /// The bodies of all connections together passed `BodyBudget.limit`: answered 503.
    var overBudget = false

    init(budget: BodyBudget) { self.budget = budget }

    deinit { budget.release(reserved) }

    /// Counts `n` more body bytes in the budget; false (nothing counted) when it is spent.
    func reserve(_ n: Int) -> Bool {
        guard budget.reserve(n) else { return false }
        reserved += n
        return true
    }

    func append(_ bytes: UnsafeBufferPointer<UInt8>) { body.append(contentsOf: bytes) }

    /// The body handed over (or dropped): its bytes leave the budget.
    func releaseBody() {
        body = []
        budget.release(reserved)
        reserved = 0
    }
}

/// Request bodies buffered at once, over all connections: past `limit` a request is
/// answered 503 rather than buffered, so many connections sending large bodies cannot
/// grow the emulator without bound (each is also limited on its own: 413).
final class BodyBudget: Sendable {
    static let limit = 64 << 20
    private let used = Atomic<Int>(0)

    func reserve(_ n: Int) -> Bool {
        var current = used.load(ordering: .relaxed)
        while true {
            guard current + n <= Self.limit else { return false }
            let (exchanged, original) = used.compareExchange(expected: current, desired: current + n, ordering: .relaxed)
            if exchanged { return true }
            current = original
        }
    }

    func release(_ n: Int) {
        if n > 0 { used.subtract(n, ordering: .relaxed) }
    }

    var bytes: Int { used.load(ordering: .relaxed) }
}
