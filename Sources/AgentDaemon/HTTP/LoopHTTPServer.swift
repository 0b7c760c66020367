import AgentCore
import AgentPosix
import MicroHTTPD
import Glibc

/// A request as the HTTP interface sees it: the body is complete.
struct HTTPServerRequest {
    var method: String
    /// The path, without the query string.
    var path: String
    /// Header names lowercased, in arrival order.
    var headers: [HTTPHeader]
    var body: [UInt8]
    /// The body was over `HTTPSettings.maximumBodyBytes` (and dropped): the answer is 413.
    var bodyTooLarge = false
    /// Why the path could not be decoded (`path` is then as it came): the answer is 400.
    var unreadablePath: String?

    func header(_ name: String) -> String? { headers.value(named: name) }
}

struct HTTPServerResponse {
    var status: Int
    var headers: [(name: String, value: String)] = []
    var body: [UInt8] = []
    /// Set for an answer without an end (docs/http.md F.3's event stream): `body` is unused,
    /// what is written to the stream is sent as it comes.
    var stream: EventStream?
    /// Set for a large answer many clients get alike (the bulk OFREP answer): libmicrohttpd
    /// keeps one copy of it for every connection it is sent on, instead of one each, so
    /// clients that do not read it cost no memory each.
    var shared: SharedResponse?

    static func json(_ status: Int, _ value: JSONValueBox, headers: [(name: String, value: String)] = []) -> HTTPServerResponse {
        HTTPServerResponse(status: status, headers: [("Content-Type", "application/json")] + headers, body: value.bytes)
    }
}

/// One libmicrohttpd response (status, headers and body fixed), queued on any number of
/// connections: libmicrohttpd counts its users and frees it after the last.
final class SharedResponse {
    private var response: OpaquePointer?

    /// Made on first use, on the loop thread.
    func mhdResponse(_ answer: HTTPServerResponse) -> OpaquePointer? {
        if let response { return response }
        response = MicroHTTPD.makeResponse(headers: answer.headers, body: answer.body)
        return response
    }

    deinit { if let response { MHD.destroyResponse(response) } }
}

/// JSON bytes written by the project's writer (sorted keys: equal values, equal bytes).
struct JSONValueBox {
    var bytes: [UInt8]
}

/// libmicrohttpd driven by the agent's own event loop (docs/http.md F): `MHD_USE_EPOLL`
/// without an internal thread, MHD's epoll descriptor registered in our loop, `MHD_run`
/// when it is readable, and one loop timer at `MHD_get_timeout`. No thread of its own;
/// everything here runs on the loop thread.
///
/// Limits: bodies over `HTTPSettings.maximumBodyBytes` get 413 (the rest of the body is
/// read and dropped); at most `limits.connections` connections (`[HTTP] MaxConnections=`):
/// at the limit a new connection takes the place of the one that has waited longest for
/// its request (`onEvicted`), and is refused only when every connection is being answered
/// (`onRefused`); a connection whose answers lie unsent past `maximumUnsentBytes` (a client
/// that pipelines requests and does not read) is neither answered nor read until they drain,
/// and counts as waiting meanwhile; a connection whose request (headers and body) has not arrived within
/// `limits.requestRead` of its opening or of its previous answer is closed
/// (`onRequestTimeout`); `limits.idle` closes idle connections. A request line or header
/// that is not one reading (two `Content-Length`s, a path that decodes to no UTF-8) is a 400;
/// an encoded NUL or control character stays in the path (`key%00` is not `key`). The connections' bookkeeping is in LoopHTTPServer+Connections.swift,
/// answers without an end (event streams) in LoopHTTPServer+Streams.swift.
final class LoopHTTPServer {
    /// The answer now, or nil when the handler calls the reply later (the connection is
    /// suspended meanwhile and serves nothing else).
    typealias Handler = (HTTPServerRequest, _ reply: @escaping (HTTPServerResponse) -> Void) -> HTTPServerResponse?

    struct Limits {
        var connections: Int
        /// Seconds (libmicrohttpd's `MHD_OPTION_CONNECTION_TIMEOUT`).
        var idle: UInt32
        /// `RequestReadTimeout=`, seconds.
        var requestRead: Double
    }

    let loop: EventLoop
    private let handler: Handler
    let onRefused: () -> Void
    let onEvicted: () -> Void
    let onRequestTimeout: () -> Void
    var limits: Limits
    var daemon: OpaquePointer?
    private var epollFD: Int32 = -1
    private var timer: EventLoop.TimerHandle?
    private var timerDeadline: Double?
    /// Open HTTP connections by libmicrohttpd's connection (MHD_OPTION_NOTIFY_CONNECTION).
    var open: [OpaquePointer: OpenConnection] = [:]
    /// Connections opened so far (each one's `serial`).
    var openedCount = 0
    /// The timer of `RequestReadTimeout`: armed while any connection is open.
    var readTimer: EventLoop.TimerHandle?
    /// Connections waiting for an answer that comes later (MHD_suspend_connection).
    var suspended: Set<OpaquePointer> = []
    /// Event streams' connections, suspended until there is something to send.
    var streamsWaiting: Set<OpaquePointer> = []
    /// Connections whose answers pile up unread, suspended until they drain
    /// (LoopHTTPServer+Connections.swift), and the timer that looks at them meanwhile.
    var stalled: Set<OpaquePointer> = []
    var stallTimer: EventLoop.TimerHandle?
    /// Unsent answer bytes past which a connection's next request waits (and the connection
    /// is not read): a client that pipelines requests and never reads costs this much, and counts
    /// as waiting, not as being answered.
    static let maximumUnsentBytes = 64 * 1024
    /// How often stalled connections are looked at (whether their answers drained).
    static let stallCheckInterval = 0.05
    /// Within `MHD_run` (libmicrohttpd is not reentrant: a pass asked for meanwhile comes after).
    private var running = false
    private var runScheduled = false

    var connectionCount: Int { open.count }

    init(loop: EventLoop, limits: Limits, onRefused: @escaping () -> Void, onEvicted: @escaping () -> Void,
         onRequestTimeout: @escaping () -> Void, handler: @escaping Handler) {
        self.loop = loop
        self.limits = limits
        self.onRefused = onRefused
        self.onEvicted = onEvicted
        self.onRequestTimeout = onRequestTimeout
        self.handler = handler
    }

    deinit { stop() }

    /// Starts serving on `listenFD` (a listening, nonblocking stream socket; libmicrohttpd
    /// closes it when stopped).
    func start(listenFD: Int32) throws(HTTPServiceError) {
        let me = Unmanaged.passUnretained(self).toOpaque()
        let completed: @convention(c) (UnsafeMutableRawPointer?, OpaquePointer?, UnsafeMutablePointer<UnsafeMutableRawPointer?>?,
                                       MHD_RequestTerminationCode) -> Void = { cls, connection, conCls, _ in
            if let cls, let connection {
                Unmanaged<LoopHTTPServer>.fromOpaque(cls).takeUnretainedValue().requestEnded(connection)
            }
            guard let conCls, let raw = conCls.pointee else { return }
            Unmanaged<PendingRequest>.fromOpaque(raw).release()
            conCls.pointee = nil
        }
        let notify: @convention(c) (UnsafeMutableRawPointer?, OpaquePointer?, UnsafeMutablePointer<UnsafeMutableRawPointer?>?,
                                    MHD_ConnectionNotificationCode) -> Void = { cls, connection, _, code in
            guard let cls, let connection else { return }
            let server = Unmanaged<LoopHTTPServer>.fromOpaque(cls).takeUnretainedValue()
            if code == MHD_ConnectionNotificationCode.CONNECTION_NOTIFY_STARTED {
                server.opened(connection)
            } else {
                server.closed(connection)
            }
        }
        // The path is decoded here, not by libmicrohttpd (whose decoding ends the path at an
        // encoded NUL: `key%00` would read as `key`).
        let keepEscaped: @convention(c) (UnsafeMutableRawPointer?, OpaquePointer?, UnsafeMutablePointer<CChar>?) -> Int = { _, _, text in
            text.map { strlen($0) } ?? 0
        }
        // libmicrohttpd's own limit leaves room for connections evicted and not yet closed
        // (the accept policy decides first): at its limit it takes the listening socket out
        // of its epoll set.
        let options: [CVarArg] = [
            Int32(MHD_OPTION.LISTEN_SOCKET.rawValue), listenFD,
            Int32(MHD_OPTION.CONNECTION_TIMEOUT.rawValue), UInt32(limits.idle),
            Int32(MHD_OPTION.CONNECTION_LIMIT.rawValue), UInt32(2 * max(1, limits.connections) + 8),
            Int32(MHD_OPTION.UNESCAPE_CALLBACK.rawValue), OpaquePointer(unsafeBitCast(keepEscaped, to: UnsafeRawPointer.self)), OpaquePointer(me),
            Int32(MHD_OPTION.NOTIFY_COMPLETED.rawValue), OpaquePointer(unsafeBitCast(completed, to: UnsafeRawPointer.self)), OpaquePointer(me),
            Int32(MHD_OPTION.NOTIFY_CONNECTION.rawValue), OpaquePointer(unsafeBitCast(notify, to: UnsafeRawPointer.self)), OpaquePointer(me),
            Int32(MHD_OPTION.END.rawValue),
        ]
        // MHD_USE_EPOLL without a thread flag: libmicrohttpd starts no thread; we call
        // MHD_run. Suspending lets an answer come later (its resumption is an event on the
        // epoll descriptor we watch).
        let flags = MHD_USE_EPOLL.rawValue | MHD_ALLOW_SUSPEND_RESUME.rawValue
        let started = withVaList(options) { va in
            MHD.startDaemon(flags, 0, { cls, _, _ in
                guard let cls else { return MHD_Result.NO }
                return Unmanaged<LoopHTTPServer>.fromOpaque(cls).takeUnretainedValue().admit() ? MHD_Result.YES : MHD_Result.NO
            }, me, { cls, connection, url, method, _, uploadData, uploadDataSize, conCls in
                guard let cls, let connection, let url, let method, let uploadDataSize, let conCls else { return MHD_Result.NO }
                let server = Unmanaged<LoopHTTPServer>.fromOpaque(cls).takeUnretainedValue()
                return server.access(connection, url: url, method: method, uploadData: uploadData,
                                     uploadDataSize: uploadDataSize, conCls: conCls)
            }, me, va)
        }
        guard let started else {
            Glibc.close(listenFD)
            throw HTTPServiceError("libmicrohttpd could not start")
        }
        daemon = started
        let fd = MHD.epollFD(started)
        guard fd >= 0 else {
            stop()
            throw HTTPServiceError("libmicrohttpd has no epoll descriptor")
        }
        epollFD = fd
        do {
            try loop.register(epollFD, interest: .read) { [unowned self] _ in self.run() }
        } catch {
            stop()
            throw HTTPServiceError("cannot watch libmicrohttpd's epoll descriptor: \(error)")
        }
        run()
    }

    /// Closes every HTTP connection and the listening socket. Idempotent.
    func stop() {
        guard let daemon else { return }
        if let timer { loop.cancel(timer) }
        timer = nil
        timerDeadline = nil
        if let readTimer { loop.cancel(readTimer) }
        readTimer = nil
        if let stallTimer { loop.cancel(stallTimer) }
        stallTimer = nil
        if epollFD >= 0 { loop.unregister(epollFD) }
        epollFD = -1
        self.daemon = nil
        for connection in suspended.union(streamsWaiting).union(stalled) { MHD.resumeConnection(connection) }  // libmicrohttpd stops none suspended
        for entry in open.values { entry.stream?.finish() }
        suspended.removeAll()
        streamsWaiting.removeAll()
        stalled.removeAll()
        MHD.stopDaemon(daemon)
        for connection in open.values where connection.watched { loop.unregister(connection.fd) }
        open.removeAll()
    }

    /// One pass of libmicrohttpd's work, then its next timeout on our loop's timer.
    ///
    /// A pass that closed connections runs once more: libmicrohttpd takes its listening
    /// socket out of its epoll set at its connection limit (or when accept fails for want
    /// of descriptors) and puts it back only at the start of a later pass, once it counts
    /// fewer connections, which it does at the end of the pass that closed them. With no
    /// connection left there would be no event and no timeout to call it again: the
    /// listener would stay deaf for good, its backlog filling, nothing logged.
    func run() {
        guard let daemon, !running else { return runSoon() }
        running = true
        var count = open.count
        _ = MHD.run(daemon)
        while self.daemon != nil, open.count < count {
            count = open.count
            _ = MHD.run(daemon)
        }
        running = false
        var milliseconds: UInt64 = 0
        guard self.daemon != nil, MHD.getTimeout(daemon, &milliseconds) == MHD_Result.YES else {
            if let timer { loop.cancel(timer) }
            timer = nil
            timerDeadline = nil
            return
        }
        let deadline = loop.iterationTime + Double(milliseconds) / 1000
        // Idle deadlines move with every request: keep the armed timer unless it is late.
        if let armed = timerDeadline, armed <= deadline, deadline - armed < 1 { return }
        if let timer { loop.cancel(timer) }
        timerDeadline = deadline
        timer = loop.schedule(at: deadline) { [unowned self] in
            self.timer = nil
            self.timerDeadline = nil
            self.run()
        }
    }

    /// A pass of libmicrohttpd's work soon (after the one running, if any).
    func runSoon() {
        guard daemon != nil, !runScheduled else { return }
        runScheduled = true
        loop.schedule(after: 0) { [weak self] in
            guard let self else { return }
            self.runScheduled = false
            self.run()
        }
    }

    // MARK: - The access handler

    /// Called by libmicrohttpd: once with the headers, once per piece of the body, once at
    /// the end of the request.
    private func access(_ connection: OpaquePointer, url: UnsafePointer<CChar>, method: UnsafePointer<CChar>,
                        uploadData: UnsafePointer<CChar>?, uploadDataSize: UnsafeMutablePointer<Int>,
                        conCls: UnsafeMutablePointer<UnsafeMutableRawPointer?>) -> MHD_Result {
        loop.assertOnLoopThread()
        guard let raw = conCls.pointee else {
            let headers = Self.headers(connection)
            let pending = PendingRequest(headers: headers)
            conCls.pointee = Unmanaged.passRetained(pending).toOpaque()
            switch Self.readPath(url, headers: headers) {
            case .path(let path):
                pending.path = path
                return MHD_Result.YES
            case .unreadable(let raw, let problem):
                pending.path = raw
                pending.unreadablePath = problem
                return MHD_Result.YES
            case .refused(let refusal):
                // Answered before its body: libmicrohttpd closes the connection after it.
                requestComplete(connection)
                return send(refusal, on: connection)
            }
        }
        let pending = Unmanaged<PendingRequest>.fromOpaque(raw).takeUnretainedValue()
        if let later = pending.later {  // resumed: the answer has come
            pending.later = nil
            return send(later, on: connection)
        }
        if uploadDataSize.pointee > 0 {
            let n = uploadDataSize.pointee
            if pending.body.count + n > HTTPSettings.maximumBodyBytes {
                pending.tooLarge = true
                pending.body = []
            } else if !pending.tooLarge, let uploadData {
                uploadData.withMemoryRebound(to: UInt8.self, capacity: n) {
                    pending.body.append(contentsOf: UnsafeBufferPointer(start: $0, count: n))
                }
            }
            uploadDataSize.pointee = 0
            return MHD_Result.YES
        }
        // Evicted or closed while its request waited: nothing to answer.
        if open[connection]?.closing == true { return MHD_Result.NO }
        // Earlier answers unread past the bound: this one waits, and the connection is not read.
        if stallIfUnread(connection) { return MHD_Result.YES }
        requestComplete(connection)
        let request = HTTPServerRequest(method: String(cString: method), path: pending.path, headers: pending.headers,
                                        body: pending.body, bodyTooLarge: pending.tooLarge, unreadablePath: pending.unreadablePath)
        pending.body = []
        let reply: (HTTPServerResponse) -> Void = { [weak self] response in
            guard let self, self.daemon != nil, self.suspended.remove(connection) != nil else { return }
            pending.later = response
            MHD.resumeConnection(connection)
            self.run()
        }
        if let response = handler(request, reply) { return send(response, on: connection) }
        suspended.insert(connection)
        MHD.suspendConnection(connection)
        return MHD_Result.YES
    }

    private func send(_ response: HTTPServerResponse, on connection: OpaquePointer) -> MHD_Result {
        if let stream = response.stream { return queueStream(stream, response, on: connection) }
        queued(response, on: connection)
        if let shared = response.shared {
            guard let made = shared.mhdResponse(response) else { return MHD_Result.NO }
            return MHD.queueResponse(connection, UInt32(response.status), made)
        }
        return MicroHTTPD.respond(connection, status: response.status, headers: response.headers, body: response.body)
    }

    /// Header fields with lowercase names.
    private static func headers(_ connection: OpaquePointer) -> [HTTPHeader] {
        MicroHTTPD.values(connection, MHD_ValueKind.HEADER_KIND).map { HTTPHeader($0.name.lowercased(), $0.value) }
    }
}

/// Per-request state kept in libmicrohttpd's `con_cls`.
private final class PendingRequest {
    let headers: [HTTPHeader]
    /// Decoded, without the query (as it came when it cannot be decoded).
    var path = ""
    var unreadablePath: String?
    var body: [UInt8] = []
    var tooLarge = false
    /// An answer that came after the connection was suspended.
    var later: HTTPServerResponse?

    init(headers: [HTTPHeader]) { self.headers = headers }
}

struct HTTPServiceError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
