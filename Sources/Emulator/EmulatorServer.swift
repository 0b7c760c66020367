import AgentCore
import AgentPosix
import MicroHTTPD
import Dispatch
import EmulatorCore
import Foundation
import Glibc
import Lab
import Synchronization

public struct EmulatorServerError: Error, CustomStringConvertible, Sendable, Equatable {
    public var description: String
    public init(description: String) { self.description = description }
}

/// The Pushwoosh emulator's HTTP server (docs/emulator.md D) on libmicrohttpd.
///
/// ```swift
/// let server = try EmulatorServer(listen: "127.0.0.1:0", apps: apps)
/// let port = try server.start()      // the bound port; 0 picks a free one
/// defer { server.stop() }
/// ```
///
/// Threading: libmicrohttpd's epoll thread pool. The state is one `Mutex`
/// held only while a request is applied (JSON parsing and serializing happen
/// outside it). `delayMs`, `stallAfterHeaders` and a parked
/// `GET /admin/requests/wait` suspend the connection (`MHD_suspend_connection`)
/// and resume it from a timer or from the device call that completes the wait,
/// so no thread and no lock is held while waiting, and a waiting request never
/// holds up another. Lock order: `state` may be held when `runtime` is taken,
/// never the reverse.
public final class EmulatorServer: Sendable {
    public let host: String
    public let requestedPort: UInt16
    public let threads: Int
    public let verbose: Bool
    /// Largest request body accepted (an admin call's); larger ones get 413. A device API
    /// call's is `EmulatorConfiguration.maxDeviceBodyBytes`.
    public static let maxBodyBytes = EmulatorConfiguration.maxAdminBodyBytes

    let state: Mutex<EmulatorState>
    let runtime = Mutex(Runtime())
    let clock: any EmulatorClock
    let connectionLimit: Int
    /// Seconds a connection may stay quiet before libmicrohttpd closes it (`--idle-timeout`).
    public let idleTimeout: Int
    /// The connections open and which of them are idle: past `connectionLimit` the oldest idle
    /// one is closed for the newest (docs/emulator.md D.5).
    let connections: ConnectionBudget
    /// Connections libmicrohttpd itself takes beyond `connectionLimit`: a new one must be
    /// accepted to close an idle one for it.
    static let acceptReserve = 32
    /// `--idle-timeout`'s default, in seconds.
    public static let defaultIdleTimeout = 30
    let log: (@Sendable (String) -> Void)?
    /// The admin token and the body limits, checked on a request's headers before its body is read.
    let configuration: EmulatorConfiguration
    /// The bytes of request bodies being received, all connections together.
    let bodies = BodyBudget()
    /// HTTPS instead of HTTP (`--tls-cert`, `--tls-key`): libmicrohttpd's own TLS (GnuTLS).
    public let tls: TLSIdentity?
    /// `--upstream URL [--record FILE]`: where forwarded device API calls go.
    public let upstream: Upstream?
    /// `--lab DIR`: the lab's devices and clock behind `/lab/*` (docs/lab.md M); set once
    /// the server has its port (the devices need its URL), before requests come.
    let labService = Mutex<LabService?>(nil)

    struct Runtime {
        var daemon: Handle?
        var port: UInt16 = 0
        var stopping = false
        /// Connections suspended (a `delayMs`, a stall, a parked wait), by address, until resumed.
        var suspended: [UInt: Handle] = [:]
        /// Parked waits' connections by ticket, and the answers waiting for them by connection.
        var parked: [Int: UInt] = [:]
        var answers: [UInt: EmulatorResponse] = [:]
        /// Tickets answered before their connection was parked (a device call on another thread won the race).
        var early: [Int: EmulatorResponse] = [:]
    }

    /// A libmicrohttpd daemon or connection handle. @unchecked Sendable:
    /// libmicrohttpd allows `MHD_resume_connection` and `MHD_stop_daemon`
    /// from any thread, and these are the only calls made with a handle
    /// outside libmicrohttpd's own threads; `Runtime`'s lock orders them.
    struct Handle: @unchecked Sendable {
        let raw: OpaquePointer
    }

    /// - Parameters:
    ///   - listen: `HOST:PORT` with an IPv4 address (or `localhost`); port 0 picks a free port.
    ///   - threads: libmicrohttpd's thread pool size.
    ///   - log: receives one line per notable event (app loaded, fault armed or fired); nil: silent.
    ///   - verbose: also log one line per request.
    ///   - clock: the host time given to the state; the emulator's time is it plus the state's clock offset.
    ///   - initialState: a saved lab (`--state FILE`) loaded over `apps` at start; `POST /admin/reset` goes back to `apps`.
    ///   - connectionLimit: connections open at once (parked waits count); past it a new one
    ///     closes the connection idle the longest.
    ///   - idleTimeout: seconds a connection may stay quiet (no request, nothing read or
    ///     sent) before it is closed; a parked wait or a delayed answer is not quiet.
    public init(listen: String = "127.0.0.1:0", configuration: EmulatorConfiguration = EmulatorConfiguration(),
                apps: [Application] = [], threads: Int = max(2, ProcessInfo.processInfo.activeProcessorCount),
                verbose: Bool = false, log: (@Sendable (String) -> Void)? = nil,
                clock: any EmulatorClock = SystemClock(), initialState: StateDocument? = nil,
                connectionLimit: Int = 4096, idleTimeout: Int = EmulatorServer.defaultIdleTimeout,
                tls: TLSIdentity? = nil, upstream: Upstream? = nil) throws(EmulatorServerError) {
        let (host, port) = try Self.parseListen(listen)
        self.tls = tls
        self.upstream = upstream
        self.host = host
        requestedPort = port
        self.threads = max(1, threads)
        self.verbose = verbose
        self.log = log
        self.clock = clock
        self.connectionLimit = max(16, connectionLimit)
        self.idleTimeout = max(1, idleTimeout)
        connections = ConnectionBudget(limit: self.connectionLimit, log: log)
        self.configuration = configuration
        var initial = EmulatorState(configuration: configuration, apps: apps, clock: clock)
        if let initialState { initial.load(initialState) }
        state = Mutex(initial)
    }

    /// Splits `HOST:PORT`; `localhost` means 127.0.0.1.
    public static func parseListen(_ text: String) throws(EmulatorServerError) -> (String, UInt16) {
        guard let colon = text.lastIndex(of: ":") else {
            throw EmulatorServerError(description: "--listen: expected HOST:PORT, found \"\(text)\"")
        }
        var host = String(text[..<colon])
        if host == "localhost" { host = "127.0.0.1" }
        var addr = in_addr()
        guard inet_pton(AF_INET, host, &addr) == 1 else {
            throw EmulatorServerError(description: "--listen: expected an IPv4 address, found \"\(host)\"")
        }
        guard let port = UInt16(text[text.index(after: colon)...]) else {
            throw EmulatorServerError(description: "--listen: expected a port 0-65535 in \"\(text)\"")
        }
        return (host, port)
    }

    /// The bound port once started, else 0.
    public var port: UInt16 { runtime.withLock { $0.port } }

    /// Runs `body` on the state under the lock (in-process tests and tools).
    public func withState<R: Sendable>(_ body: (inout EmulatorState) -> R) -> R {
        state.withLock { body(&$0) }
    }

    /// Binds, starts serving and returns the bound port.
    @discardableResult
    public func start() throws(EmulatorServerError) -> UInt16 {
        if runtime.withLock({ $0.daemon != nil }) { return port }
        let (fd, port) = try bindListener()
        let me = Unmanaged.passRetained(self).toOpaque()

        let completed: @convention(c) (UnsafeMutableRawPointer?, OpaquePointer?, UnsafeMutablePointer<UnsafeMutableRawPointer?>?,
                                       MHD_RequestTerminationCode) -> Void = { cls, connection, conCls, _ in
            if let cls, let connection {  // its answer is out (or it is closing): idle again
                Unmanaged<EmulatorServer>.fromOpaque(cls).takeUnretainedValue().connections.idle(EmulatorServer.key(connection))
            }
            guard let conCls, let raw = conCls.pointee else { return }
            Unmanaged<RequestContext>.fromOpaque(raw).release()
            conCls.pointee = nil
        }
        let notify: @convention(c) (UnsafeMutableRawPointer?, OpaquePointer?, UnsafeMutablePointer<UnsafeMutableRawPointer?>?,
                                    MHD_ConnectionNotificationCode) -> Void = { cls, connection, _, code in
            guard let cls, let connection else { return }
            let connections = Unmanaged<EmulatorServer>.fromOpaque(cls).takeUnretainedValue().connections
            if code == .CONNECTION_NOTIFY_STARTED {
                connections.opened(EmulatorServer.key(connection), fd: MHD.connectionFD(connection))
            } else {
                connections.closed(EmulatorServer.key(connection))
            }
        }
        var flags = MHD_USE_EPOLL_INTERNAL_THREAD.rawValue | MHD_ALLOW_SUSPEND_RESUME.rawValue
        if verbose { flags |= MHD_USE_ERROR_LOG.rawValue }
        var options: [CVarArg] = []
        if let tls {
            guard MHD.isFeatureSupported(MHD_FEATURE(rawValue: 2)!) == MHD_Result.YES else {
                close(fd)
                Unmanaged<EmulatorServer>.fromOpaque(me).release()
                throw EmulatorServerError(description: "this libmicrohttpd has no TLS support")
            }
            flags |= MHD_USE_TLS.rawValue
            // libmicrohttpd reads both at start (gnutls_certificate_set_x509_key_mem); they live as long as `tls`.
            options += [Int32(MHD_OPTION.HTTPS_MEM_CERT.rawValue), tls.certificate.pointer,
                        Int32(MHD_OPTION.HTTPS_MEM_KEY.rawValue), tls.key.pointer]
        }
        options += [
            Int32(MHD_OPTION.LISTEN_SOCKET.rawValue), Int32(fd),
            Int32(MHD_OPTION.THREAD_POOL_SIZE.rawValue), UInt32(threads),
            Int32(MHD_OPTION.CONNECTION_TIMEOUT.rawValue), UInt32(idleTimeout),
            Int32(MHD_OPTION.CONNECTION_LIMIT.rawValue), UInt32(connectionLimit + Self.acceptReserve),
            Int32(MHD_OPTION.NOTIFY_CONNECTION.rawValue), OpaquePointer(unsafeBitCast(notify, to: UnsafeRawPointer.self)), OpaquePointer(me),
            Int32(MHD_OPTION.NOTIFY_COMPLETED.rawValue), OpaquePointer(unsafeBitCast(completed, to: UnsafeRawPointer.self)), OpaquePointer(me),
            Int32(MHD_OPTION.END.rawValue),
        ]
        let daemon = withVaList(options) { va in
            MHD.startDaemon(flags, 0, nil, nil, { cls, connection, url, method, _, uploadData, uploadDataSize, conCls in
                guard let cls, let connection, let url, let method, let uploadDataSize, let conCls else { return MHD_Result.NO }
                let server = Unmanaged<EmulatorServer>.fromOpaque(cls).takeUnretainedValue()
                return server.access(connection, url: url, method: method, uploadData: uploadData,
                                     uploadDataSize: uploadDataSize, conCls: conCls)
            }, me, va)
        }
        guard let daemon = daemon.map(Handle.init) else {
            close(fd)
            Unmanaged<EmulatorServer>.fromOpaque(me).release()
            let why = tls == nil ? "" : " (with TLS: is the key the certificate's, both PEM?)"
            throw EmulatorServerError(description: "libmicrohttpd could not start on \(host):\(port)\(why)")
        }
        runtime.withLock {
            $0.daemon = daemon
            $0.port = port
            $0.stopping = false
        }
        let (apps, flagCount) = state.withLock { s in (s.apps.count, s.apps.values.reduce(0) { $0 + $1.flags.count }) }
        log?("emulator started listen=\(host):\(port) tls=\(tls == nil ? "no" : "yes") apps=\(apps) flags=\(flagCount) threads=\(threads) "
             + "maxConnections=\(connectionLimit) idleTimeoutSeconds=\(idleTimeout)")
        return port
    }

    /// Stops serving: resumes delayed connections, stops libmicrohttpd (which
    /// closes every connection and the listening socket). Idempotent.
    public func stop() {
        let daemon: Handle? = runtime.withLock { r in
            guard let d = r.daemon else { return nil }
            r.stopping = true
            // libmicrohttpd requires every suspended connection to be resumed before stopping.
            for (_, c) in r.suspended { MHD.resumeConnection(c.raw) }
            r.suspended.removeAll()
            r.parked.removeAll()
            r.early.removeAll()
            r.daemon = nil
            r.port = 0
            return d
        }
        guard let daemon else { return }
        state.withLock { $0.cancelAllWaits() }  // their connections were resumed unanswered: closed
        MHD.stopDaemon(daemon.raw)
        Unmanaged.passUnretained(self).release()  // the reference taken in start()
        log?("emulator stopped")
    }

    private func bindListener() throws(EmulatorServerError) -> (Int32, UInt16) {
        do {
            return try TCPListener.listen(host: host, port: requestedPort, backlog: 1024)
        } catch {
            throw EmulatorServerError(description: "cannot listen on \(host):\(requestedPort): \(error.message)")
        }
    }

    // MARK: - The access handler

    /// Called by libmicrohttpd several times per request: once with the
    /// headers, once per piece of the body, once at the end, and once more
    /// after a delayed connection is resumed.
    func access(_ connection: OpaquePointer, url: UnsafePointer<CChar>, method: UnsafePointer<CChar>,
                uploadData: UnsafePointer<CChar>?, uploadDataSize: UnsafeMutablePointer<Int>,
                conCls: UnsafeMutablePointer<UnsafeMutableRawPointer?>) -> MHD_Result {
        guard let raw = conCls.pointee else { return begin(connection, url: url, conCls: conCls) }
        let ctx = Unmanaged<RequestContext>.fromOpaque(raw).takeUnretainedValue()
        if ctx.refused {  // answered at the headers: whatever body follows is dropped unread
            uploadDataSize.pointee = 0
            return MHD_Result.YES
        }
        if let pending = ctx.pending {  // resumed after delayMs, or a parked wait answered
            ctx.pending = nil
            switch pending {
            case .respond(let response, let delivery): return send(response, delivery, on: connection)
            case .drop: return MHD_Result.NO
            case .reset: return reset(connection)
            case .parked(let key):
                guard let answer = runtime.withLock({ $0.answers.removeValue(forKey: key) }) else { return MHD_Result.NO }
                return send(answer, .normal, on: connection)
            }
        }
        if uploadDataSize.pointee > 0 {
            receive(ctx, uploadData, count: uploadDataSize.pointee)
            uploadDataSize.pointee = 0
            return MHD_Result.YES
        }
        connections.busy(Self.key(connection))  // the request is whole: it is handled from here on
        if let refusal = refusal(ctx) { return send(refusal, .normal, on: connection) }

        let request = EmulatorRequest(method: String(cString: method), path: String(cString: url),
                                  query: Self.values(connection, MHD_ValueKind.GET_ARGUMENT_KIND).reduce(into: [:]) { $0[$1.name] = $1.value },
                                  headers: Self.values(connection, MHD_ValueKind.HEADER_KIND), body: ctx.body)
        ctx.releaseBody()
        if isForLab(request) { return lab(request, connection, ctx) }
        let prepared = PreparedRequest(request)   // routing and JSON parsing: outside the lock
        let now = clock.now()
        let outcome = state.withLock { $0.handle(prepared, now: now) }
        var response = outcome.render()          // serializing: outside the lock
        if outcome.forward, let upstream {  // the network: outside the lock too
            let answer = upstream.forward(request)
            if let call = outcome.forwardedCall { state.withLock { $0.forwardAnswered(call: call, status: answer.status) } }
            response = answer
        }
        for (ticket, answer) in outcome.woken {
            if let r = answer.render() { deliver(ticket, r) }
        }
        if let log {
            for line in outcome.events { log(line) }
            if verbose {
                let what = outcome.wait != nil ? "parked" : response.map { String($0.status) } ?? "dropped"
                log("request method=\(request.method) path=\(request.path) status=\(what) delayMs=\(outcome.delayMs)")
            }
        }
        if let wait = outcome.wait, let ticket = outcome.ticket {
            return park(connection, ctx, ticket: ticket, timeout: wait.timeout)
        }
        if outcome.delayMs > 0 {
            ctx.pending = response.map { .respond($0, outcome.delivery) } ?? (outcome.delivery == .reset ? .reset : .drop)
            return suspend(connection, forMilliseconds: outcome.delayMs)
        }
        if outcome.delivery == .reset { return reset(connection) }
        guard let response else { return MHD_Result.NO }  // drop: libmicrohttpd closes the connection unanswered
        return send(response, outcome.delivery, on: connection)
    }

    static func key(_ connection: OpaquePointer) -> UInt { UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(connection))) }

    /// Parks a wait's connection until `deliver` answers its ticket or its timeout fires.
    private func park(_ connection: OpaquePointer, _ ctx: RequestContext, ticket: Int, timeout: Double) -> MHD_Result {
        let key = Self.key(connection)
        enum Parking { case parked, answered(EmulatorResponse), stopping }
        let result: Parking = runtime.withLock { r in
            if let early = r.early.removeValue(forKey: ticket) { return .answered(early) }
            if r.stopping { return .stopping }
            MHD.suspendConnection(connection)
            r.suspended[key] = Handle(raw: connection)
            r.parked[ticket] = key
            return .parked
        }
        switch result {
        case .answered(let response): return send(response, .normal, on: connection)
        case .stopping:
            state.withLock { $0.cancelWait(ticket) }
            return MHD_Result.NO
        case .parked:
            ctx.pending = .parked(key)
            DispatchQueue.global().asyncAfter(deadline: .now() + timeout) { [self] in
                guard let answer = state.withLock({ $0.timeOutWait(ticket) })?.render() else { return }
                deliver(ticket, answer)
            }
            return MHD_Result.YES
        }
    }

    /// Answers a parked wait: resumes its connection, or keeps the answer for it if it is not parked yet.
    func deliver(_ ticket: Int, _ response: EmulatorResponse) {
        runtime.withLock { r in
            guard let key = r.parked.removeValue(forKey: ticket) else {
                if !r.stopping { r.early[ticket] = response }
                return
            }
            r.answers[key] = response
            if let c = r.suspended.removeValue(forKey: key) { MHD.resumeConnection(c.raw) }
        }
    }

    /// Connections open now, and those closed so far for newer ones past the limit (tests, tools).
    public var openConnections: Int { connections.count }
    public var connectionsClosedForNewer: Int { connections.closedForNewer }

    /// The parked waits (tests, tools).
    public var parkedWaits: Int { state.withLock { $0.parkedWaits } }

    private func suspend(_ connection: OpaquePointer, forMilliseconds ms: Int) -> MHD_Result {
        guard let key = suspendConnection(connection) else { return MHD_Result.NO }
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(ms)) { [self] in resume(key) }
        return MHD_Result.YES
    }

    /// Suspends `connection` until `resume`, unless the server is stopping (nil); its key.
    func suspendConnection(_ connection: OpaquePointer) -> UInt? {
        let key = Self.key(connection)
        return runtime.withLock { r in
            if r.stopping { return nil }
            MHD.suspendConnection(connection)
            r.suspended[key] = Handle(raw: connection)
            return key
        }
    }

    /// Resumes a suspended connection, with `answer` for it to send (unless stop() already
    /// resumed it).
    func resume(_ key: UInt, answer: EmulatorResponse? = nil) {
        runtime.withLock { r in
            if let answer { r.answers[key] = answer }
            if let c = r.suspended.removeValue(forKey: key) { MHD.resumeConnection(c.raw) }
        }
    }

    /// Headers or query arguments of the request, in order.
    static func values(_ connection: OpaquePointer, _ kind: MHD_ValueKind) -> [HTTPHeader] {
        MicroHTTPD.values(connection, kind).map { HTTPHeader($0.name, $0.value) }
    }
}
