import AgentCore
import AgentPosix
import AgentWire
import FoundationEssentials
import Glibc

/// The socket API (docs/socket-api.md B): line-delimited JSON-RPC 2.0 on a Unix stream socket,
/// served from the one event loop. This file is the connections: accepting them (at most
/// `MaxConnections`), who the peer is and whether it may change state (B.3), closing, and
/// the notifications to subscribers; a connection's requests are in SocketRequests.swift.
final class ControlServer {
    let loop: EventLoop
    let host: AgentOnLoop
    /// `clock` and `advanceClock` (docs/device-clock.md H); nil with `Clock=system`.
    var clockController: DeviceClockController?
    /// `status`'s `httpAddress`: where the HTTP interface listens, when the agent bound it.
    var httpAddress: String?
    /// `host.agent` (attached once, before this server exists), held as a `let`: a read
    /// through `host`'s `var` retained and released the agent for every answer, on the slow
    /// path of an object that weak references have given a side table.
    let agent: Agent
    private(set) var settings: SocketSettings
    let log: Log
    private let agentUID = getuid()
    private(set) var clients: [ObjectIdentifier: Client] = [:]
    /// Bytes of unfinished lines held beyond the clients' own allowances (ControlServer+Flow.swift).
    var lineBudgetUsed = 0
    var subscribers: [ObjectIdentifier: Client] = [:]
    /// Where fast-path answers are written before they are queued (reused: no allocation per answer).
    var scratch = JSONWriter(capacity: 512)
    /// The agent's time for the fast-path reads of the lines of one read (ControlServer+Flow.swift):
    /// read once, on the first of them; nil again for the next read, and after any line the
    /// general path took (it may have moved the device's clock).
    var readTime: Now?
    /// Counters for /metrics (docs/http.md F.2) and the `metrics` method's text.
    var metrics: Metrics?
    var metricsText: (() -> String)?
    /// What any local client can make the agent log, held to a line every 10 s per message.
    lazy var warnings = RepeatedWarnings(loop: loop, log: log)

    init(loop: EventLoop, host: AgentOnLoop, settings: SocketSettings, log: Log) {
        self.loop = loop
        self.host = host
        self.agent = host.agent
        self.settings = settings
        self.log = log
    }

    var connectionCount: Int { clients.count }

    func update(settings: SocketSettings) { self.settings = settings }

    // MARK: - Connections

    func accept(_ descriptor: consuming FileDescriptor) {
        let credentials = try? UnixSocket.peerCredentials(descriptor.rawValue)
        accept(descriptor, credentials: credentials)
    }

    /// A connection whose peer is `credentials` (what the kernel says of it, SO_PEERCRED;
    /// in-process tests pass others, e.g. a caller without control access).
    func accept(_ descriptor: consuming FileDescriptor, credentials: PeerCredentials?) {
        let connection = Connection(loop: loop, descriptor: descriptor, maxPendingOutput: Self.outputLimit)
        let control = mayChangeState(credentials)
        // B.3: at most MaxConnections, and a few more for callers with control access, so
        // that read-only clients can never refuse root or the agent's user.
        let limit = settings.maxConnections + (control ? SocketSettings.reservedControlSlots : 0)
        guard clients.count < limit else {
            metrics?.socketConnectionsRefused += 1
            refuse(connection, RPCError(code: -32000, message: "too many connections (MaxConnections=\(settings.maxConnections))"))
            warnings.warn("connection refused: too many connections", ["max": settings.maxConnections, "pid": credentials?.pid])
            return
        }
        metrics?.socketConnectionsAccepted += 1
        let client = Client(connection: connection, credentials: credentials, mayChangeState: control)
        let id = ObjectIdentifier(client)
        clients[id] = client
        connection.onInput = { [unowned self, unowned client] bytes in self.received(bytes, from: client) }
        connection.onReadEOF = { [unowned client] in
            client.inputClosed = true
            if client.pendingAnswers == 0 { client.connection.closeAfterFlush() }
        }
        connection.onOutputDrained = { [unowned self, unowned client] in self.outputDrained(client) }
        connection.onClose = { [unowned self] reason in
            if reason == .backpressure {
                self.warnings.warn("connection closed: answers not read", ["pid": credentials?.pid, "limit": Self.outputLimit])
            }
            self.clients[id] = nil
            self.subscribers[id] = nil
            self.releaseLineBudget(client)
            if let timer = client.requestTimer { self.loop.cancel(timer) }
            client.requestTimer = nil
        }
        connection.setIdleTimeout(settings.idleTimeout)
        do {
            try connection.start()
        } catch {
            clients[id] = nil
            log(.warning, "connection failed to start", ["error": error])
            return
        }
        client.awaitingSince = loop.iterationTime  // its first request is due within RequestReadTimeout
        armRequestTimer(client)
    }

    /// Refused connections still open to tell their client why (at most `maximumRefusedLingering`).
    private var refusedLingering = 0
    /// Past this many, a refused connection is closed as soon as its answer is written.
    static let maximumRefusedLingering = 64
    /// How long a refused connection waits for its client's request at most.
    static let refusedLinger = 1.0

    /// A connection refused: the client is told why (`error`, id null, then the end of the
    /// agent's output) and is read until its request has come (or it closes, or
    /// `refusedLinger` passes) before the close. Closed at
    /// once, a client that had not yet written its request met "Broken pipe" instead of the
    /// reason; its bytes are read and dropped, so the line waits in its receive buffer.
    private func refuse(_ connection: Connection, _ error: RPCError) {
        connection.send(RPCEncoder.error(id: .null, error))
        guard (try? connection.start()) != nil else { return }
        guard refusedLingering < Self.maximumRefusedLingering else { return connection.closeAfterFlush() }
        refusedLingering += 1
        // The line is written now and the agent's side shut for writing: the client reads the
        // reason, then the end, at once; its own write still goes through.
        connection.flush()
        if connection.isOpen, connection.pendingOutputBytes == 0 { _ = shutdown(connection.fd, Int32(SHUT_WR)) }
        connection.onInput = { [unowned connection] _ in connection.closeAfterFlush() }
        connection.onReadEOF = { [unowned connection] in connection.closeAfterFlush() }
        let timer = loop.schedule(after: Self.refusedLinger) { [weak connection] in connection?.close() }
        connection.onClose = { [self] _ in  // not weak: no side table for the server (see afterInput)
            refusedLingering -= 1
            loop.cancel(timer)
        }
    }

    private func mayChangeState(_ c: PeerCredentials?) -> Bool {
        guard let c else { return false }
        if c.uid == 0 || c.uid == agentUID { return true }
        if let group = settings.controlGroup { return UnixSocket.isMember(c, ofGroup: group) }
        return false
    }

    func closeAll() {
        for client in clients.values { client.connection.close() }
        clients.removeAll()
        subscribers.removeAll()
    }

    // MARK: - Notifications (LS-1, LS-2, LS-3)

    /// Sends `notification` to every subscriber that asked for its event.
    func broadcast(_ notification: SocketNotification) {
        let event = notification.event
        guard subscribers.values.contains(where: { $0.events.contains(event) }) else { return }
        let bytes = RPCEncoder.notification(method: notification.method, params: notification.params)
        for client in subscribers.values where client.events.contains(event) { client.connection.send(bytes) }
    }
}

typealias RPCOutcome = Result<JSONValue, RPCError>

extension RPCResponse {
    init(id: RPCID, _ outcome: RPCOutcome) {
        switch outcome {
        case .success(let result): self.init(id: id, result: result)
        case .failure(let error): self.init(id: id, error: error)
        }
    }
}

/// One connected client.
final class Client {
    let connection: Connection
    let credentials: PeerCredentials?
    let mayChangeState: Bool
    var framer = LineFramer()
    var pendingAnswers = 0
    var inputClosed = false
    /// Since when a request has been due (the connection's opening, or the first byte of
    /// a line not yet complete); nil when none is (RequestReadTimeout).
    var awaitingSince: Double?
    var requestTimer: EventLoop.TimerHandle?
    /// Lines read but not yet handled wait for another turn of the loop (fairness) or
    /// for the client to read its answers (back-pressure).
    var resumeScheduled = false
    /// The framer is handing out lines (it must not be read meanwhile).
    var framing = false
    /// Bytes of its unfinished line beyond `ControlServer.ownLineAllowance`, taken from the
    /// shared budget; while the budget is spent, the client is not read (`waitingForLineBudget`).
    var lineBorrowed = 0
    var waitingForLineBudget = false
    /// What a subscriber hears (docs/device-clock.md H `subscribe` `events`).
    var events: Set<SubscriptionEvent> = [.flags]

    init(connection: Connection, credentials: PeerCredentials?, mayChangeState: Bool) {
        self.connection = connection
        self.credentials = credentials
        self.mayChangeState = mayChangeState
    }
}

/// Collects a batch's answers in request order; sends once all are in.
final class BatchAnswer {
    var responses: [RPCResponse?]
    private var remaining: Int

    init(count: Int) {
        responses = Array(repeating: nil, count: count)
        remaining = count
    }

    func set(_ index: Int, _ response: RPCResponse?, then finish: () -> Void) {
        responses[index] = response
        remaining -= 1
        if remaining == 0 { finish() }
    }
}
