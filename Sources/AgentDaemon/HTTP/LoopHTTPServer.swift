import AgentPosix
import MicroHTTPD
import Glibc

/// A request as the HTTP interface sees it: the body is complete.
struct HTTPServerRequest {
    var method: String
    /// The path, without the query string.
    var path: String
    /// Header names lowercased, in arrival order.
    var headers: [(name: String, value: String)]
    var body: [UInt8]
    /// The body was over `HTTPSettings.maximumBodyBytes` (and dropped): the answer is 413.
    var bodyTooLarge = false

    func header(_ name: String) -> String? {
        headers.first { $0.name == name }?.value
    }
}

struct HTTPServerResponse {
    var status: Int
    var headers: [(name: String, value: String)] = []
    var body: [UInt8] = []

    static func json(_ status: Int, _ value: JSONValueBox, headers: [(name: String, value: String)] = []) -> HTTPServerResponse {
        HTTPServerResponse(status: status, headers: [("Content-Type", "application/json")] + headers, body: value.bytes)
    }
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
/// read and dropped); `admit` decides, per accepted connection, whether one more fits
/// (the socket's `MaxConnections` is shared); `idleTimeout` closes idle connections.
final class LoopHTTPServer {
    typealias Handler = (HTTPServerRequest) -> HTTPServerResponse

    private let loop: EventLoop
    private let handler: Handler
    private let admit: () -> Bool
    private let onRefused: () -> Void
    private var daemon: OpaquePointer?
    private var epollFD: Int32 = -1
    private var timer: EventLoop.TimerHandle?
    private var timerDeadline: Double?
    /// Open HTTP connections (MHD_OPTION_NOTIFY_CONNECTION).
    private(set) var connectionCount = 0

    init(loop: EventLoop, admit: @escaping () -> Bool, onRefused: @escaping () -> Void, handler: @escaping Handler) {
        self.loop = loop
        self.admit = admit
        self.onRefused = onRefused
        self.handler = handler
    }

    deinit { stop() }

    /// Starts serving on `listenFD` (a listening, nonblocking stream socket; libmicrohttpd
    /// closes it when stopped).
    func start(listenFD: Int32, idleTimeout: UInt32, connectionLimit: Int) throws(HTTPServiceError) {
        let me = Unmanaged.passUnretained(self).toOpaque()
        let completed: @convention(c) (UnsafeMutableRawPointer?, OpaquePointer?, UnsafeMutablePointer<UnsafeMutableRawPointer?>?,
                                       MHD_RequestTerminationCode) -> Void = { _, _, conCls, _ in
            guard let conCls, let raw = conCls.pointee else { return }
            Unmanaged<PendingRequest>.fromOpaque(raw).release()
            conCls.pointee = nil
        }
        let notify: @convention(c) (UnsafeMutableRawPointer?, OpaquePointer?, UnsafeMutablePointer<UnsafeMutableRawPointer?>?,
                                    MHD_ConnectionNotificationCode) -> Void = { cls, _, _, code in
            guard let cls else { return }
            let server = Unmanaged<LoopHTTPServer>.fromOpaque(cls).takeUnretainedValue()
            server.connectionCount += code == MHD_ConnectionNotificationCode.CONNECTION_NOTIFY_STARTED ? 1 : -1
        }
        let options: [CVarArg] = [
            Int32(MHD_OPTION.LISTEN_SOCKET.rawValue), listenFD,
            Int32(MHD_OPTION.CONNECTION_TIMEOUT.rawValue), UInt32(idleTimeout),
            Int32(MHD_OPTION.CONNECTION_LIMIT.rawValue), UInt32(max(1, connectionLimit)),
            Int32(MHD_OPTION.NOTIFY_COMPLETED.rawValue), OpaquePointer(unsafeBitCast(completed, to: UnsafeRawPointer.self)), OpaquePointer(me),
            Int32(MHD_OPTION.NOTIFY_CONNECTION.rawValue), OpaquePointer(unsafeBitCast(notify, to: UnsafeRawPointer.self)), OpaquePointer(me),
            Int32(MHD_OPTION.END.rawValue),
        ]
        // MHD_USE_EPOLL alone: libmicrohttpd starts no thread; we call MHD_run.
        let flags = MHD_USE_EPOLL.rawValue
        let started = withVaList(options) { va in
            MHD_start_daemon_va(flags, 0, { cls, _, _ in
                guard let cls else { return MHD_Result.NO }
                let server = Unmanaged<LoopHTTPServer>.fromOpaque(cls).takeUnretainedValue()
                if server.admit() { return MHD_Result.YES }
                server.onRefused()
                return MHD_Result.NO
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
        let fd = pw_mhd_epoll_fd(started)
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
        if epollFD >= 0 { loop.unregister(epollFD) }
        epollFD = -1
        self.daemon = nil
        MHD_stop_daemon(daemon)
    }

    /// One pass of libmicrohttpd's work, then its next timeout on our loop's timer.
    private func run() {
        guard let daemon else { return }
        _ = MHD_run(daemon)
        var milliseconds: UInt64 = 0
        guard self.daemon != nil, MHD_get_timeout(daemon, &milliseconds) == MHD_Result.YES else {
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

    // MARK: - The access handler

    /// Called by libmicrohttpd: once with the headers, once per piece of the body, once at
    /// the end of the request.
    private func access(_ connection: OpaquePointer, url: UnsafePointer<CChar>, method: UnsafePointer<CChar>,
                        uploadData: UnsafePointer<CChar>?, uploadDataSize: UnsafeMutablePointer<Int>,
                        conCls: UnsafeMutablePointer<UnsafeMutableRawPointer?>) -> MHD_Result {
        loop.assertOnLoopThread()
        guard let raw = conCls.pointee else {
            conCls.pointee = Unmanaged.passRetained(PendingRequest()).toOpaque()
            return MHD_Result.YES
        }
        let pending = Unmanaged<PendingRequest>.fromOpaque(raw).takeUnretainedValue()
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
        var fullPath = String(cString: url)
        if let q = fullPath.firstIndex(of: "?") { fullPath = String(fullPath[..<q]) }
        let request = HTTPServerRequest(method: String(cString: method), path: fullPath,
                                        headers: Self.headers(connection), body: pending.body, bodyTooLarge: pending.tooLarge)
        pending.body = []
        return send(handler(request), on: connection)
    }

    private func send(_ response: HTTPServerResponse, on connection: OpaquePointer) -> MHD_Result {
        MicroHTTPD.respond(connection, status: response.status, headers: response.headers, body: response.body)
    }

    /// Header fields with lowercase names.
    private static func headers(_ connection: OpaquePointer) -> [(name: String, value: String)] {
        MicroHTTPD.values(connection, MHD_ValueKind.HEADER_KIND).map { ($0.name.lowercased(), $0.value) }
    }
}

/// Per-request state kept in libmicrohttpd's `con_cls`.
private final class PendingRequest {
    var body: [UInt8] = []
    var tooLarge = false
}

struct HTTPServiceError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
