import AgentPosix
import MicroHTTPD
import Glibc

/// One open HTTP connection, as the agent keeps track of it beside libmicrohttpd.
final class OpenConnection {
    let fd: Int32
    /// Its place in the order of opening (of two waiting since the same instant, the
    /// earlier opened has waited longer).
    let serial: Int
    /// Since when the connection has been waiting for a complete request, headers and body
    /// (its opening, or its previous answer); nil while a request is answered, or once the
    /// connection is shut down.
    var awaitingSince: Double?
    /// Its descriptor is in our loop, watched for the peer's end of input.
    var watched = false
    /// Shut down by the agent (a request too slow, evicted at the limit); libmicrohttpd
    /// closes it on its next pass.
    var closing = false
    /// The event stream it carries (LoopHTTPServer+Streams.swift).
    var stream: EventStream?
    /// Since when its answers have piled up unread (`LoopHTTPServer.maximumUnsentBytes`): its
    /// next request waits, the connection suspended and not read, and it counts as waiting
    /// (it may be evicted); nil otherwise.
    var stalledSince: Double?
    /// At most this many of its bytes are unsent: what the last look at its send queue found,
    /// plus every answer queued since. While it is under `LoopHTTPServer.maximumUnsentBytes`, a
    /// request needs no look (no `ioctl` on the way of an answer read as it comes).
    var unsentAtMost = 0
    /// Its unsent bytes when last looked at, and since when that count has not moved.
    var stalledUnsent = 0
    var stalledUnmovedSince = 0.0

    init(fd: Int32, serial: Int, awaitingSince: Double) {
        self.fd = fd
        self.serial = serial
        self.awaitingSince = awaitingSince
    }
}

/// The connections' bookkeeping: the budget, `RequestReadTimeout`, and the peer's end of
/// input that libmicrohttpd can miss.
///
/// The budget cannot be held by clients that never finish a request: at `MaxConnections=`
/// a new connection evicts the one that has waited longest for its request (a slow or
/// dripping sender, or an idle keep-alive), so that `/healthz` and a client with the token
/// are served while any number of slow clients wait. Nor by clients that pipeline requests and
/// never read the answers: once a connection's unsent answers pass `maximumUnsentBytes`, its next
/// request waits (the connection suspended, so libmicrohttpd reads no more of it) until they
/// drain, and it counts as waiting since then; an answer stuck in a full send buffer counts as
/// waiting too when nothing else does. A new connection is refused only when every connection is
/// being answered and reading its answers (or carries an event stream).
///
/// libmicrohttpd watches connections edge-triggered and takes a short read for "nothing
/// more to read": a client whose bytes and end of input (FIN) came together, before the
/// connection was accepted (a burst that waited in the backlog), leaves a connection it
/// never reads again, holding a slot until its idle timeout. The agent watches each
/// connection's descriptor for `EPOLLRDHUP` in its own loop; when the peer has ended its
/// input while the connection waits for a request, the socket is shut down, which
/// libmicrohttpd sees, and the slot is free at once.
extension LoopHTTPServer {
    func opened(_ connection: OpaquePointer) {
        let fd = MHD.connectionFD(connection)
        openedCount += 1
        let entry = OpenConnection(fd: fd, serial: openedCount, awaitingSince: loop.iterationTime)
        open[connection] = entry
        if fd >= 0 {
            do {
                try loop.register(fd, interest: .peerClosed) { [unowned self] _ in self.peerClosed(connection, entry) }
                entry.watched = true
            } catch {
                // Unwatched: `RequestReadTimeout` still closes it.
            }
        }
        if readTimer == nil { armReadTimer(at: loop.iterationTime + limits.requestRead) }
    }

    /// libmicrohttpd is about to close the descriptor.
    func closed(_ connection: OpaquePointer) {
        suspended.remove(connection)
        stalled.remove(connection)
        guard let entry = open.removeValue(forKey: connection) else { return }
        if entry.watched { loop.unregister(entry.fd) }
        if open.isEmpty, let readTimer {
            loop.cancel(readTimer)
            self.readTimer = nil
        }
    }

    /// The accept policy: room for one more, if need be by evicting the connection that has
    /// waited longest for its request, or whose answers have piled up unread the longest.
    func admit() -> Bool {
        var live = open.count
        if live >= limits.connections { live -= open.values.lazy.filter(\.closing).count }
        if live < limits.connections { return true }
        var oldest: (connection: OpaquePointer, entry: OpenConnection)?
        var oldestSince = Double.infinity
        for (connection, entry) in open where !entry.closing {
            guard let since = entry.awaitingSince ?? entry.stalledSince else { continue }
            if since < oldestSince || (since == oldestSince && entry.serial < oldest?.entry.serial ?? .max) {
                oldest = (connection, entry)
                oldestSince = since
            }
        }
        // None waits: one whose answer is stuck in a full send buffer (a client that does not
        // read, with a send buffer smaller than the bound) is waiting too, since now.
        if oldest == nil {
            for (connection, entry) in open where !entry.closing && entry.stream == nil && !suspended.contains(connection) {
                if Self.outputBlocked(entry.fd), entry.serial < oldest?.entry.serial ?? .max { oldest = (connection, entry) }
            }
        }
        guard let oldest else {
            onRefused()
            return false
        }
        shutDown(oldest.entry)
        // A stalled connection is suspended: libmicrohttpd sees the shutdown once it runs it again.
        unstall(oldest.connection)
        onEvicted()
        return true
    }

    // MARK: - Answers that pile up unread

    /// Bytes written to `fd` that its peer has not taken (the socket's send queue, `SIOCOUTQ`:
    /// on TCP, sent and not acknowledged, or not sent yet; on a Unix socket, not yet read).
    static func unsentBytes(_ fd: Int32) -> Int {
        var count: Int32 = 0
        guard fd >= 0, ioctl(fd, UInt(TIOCOUTQ), &count) == 0 else { return 0 }
        return Int(count)
    }

    /// Whether `fd`'s send buffer is full with bytes its peer has not taken (`poll` finds it not
    /// writable, and its send queue is not empty).
    static func outputBlocked(_ fd: Int32) -> Bool {
        guard fd >= 0 else { return false }
        var entry = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
        guard poll(&entry, 1, 0) == 0 else { return false }
        return unsentBytes(fd) > 0
    }

    /// Called when a request is complete, before it is answered: if the connection's earlier
    /// answers lie unsent past `maximumUnsentBytes` (a client pipelining requests and not
    /// reading), the connection is suspended, and so neither answered nor read, until they
    /// drain; it counts as waiting meanwhile, so the budget may evict it. True when suspended
    /// (libmicrohttpd asks again on resumption).
    func stallIfUnread(_ connection: OpaquePointer) -> Bool {
        guard let entry = open[connection], !entry.closing, entry.unsentAtMost > Self.maximumUnsentBytes else { return false }
        let unsent = Self.unsentBytes(entry.fd)
        entry.unsentAtMost = unsent
        guard unsent > Self.maximumUnsentBytes else { return false }
        let now = loop.iterationTime
        entry.awaitingSince = nil
        if entry.stalledSince == nil { entry.stalledSince = now }
        entry.stalledUnsent = unsent
        entry.stalledUnmovedSince = now
        stalled.insert(connection)
        MHD.suspendConnection(connection)
        if stallTimer == nil { armStallTimer() }
        return true
    }

    /// An answer of `response`'s size queued on `connection`: its bytes count as unsent until a
    /// look at the send queue says otherwise (headers counted generously: those libmicrohttpd
    /// adds, the status line, `Date`, `Content-Length`, are under 512 bytes).
    func queued(_ response: HTTPServerResponse, on connection: OpaquePointer) {
        guard let entry = open[connection] else { return }
        entry.unsentAtMost += response.body.count + 512 + response.headers.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 4 }
    }

    /// Resumes a stalled connection (libmicrohttpd then asks for its request's answer again).
    func unstall(_ connection: OpaquePointer) {
        guard stalled.remove(connection) != nil else { return }
        open[connection]?.stalledSince = nil
        MHD.resumeConnection(connection)
        runSoon()
    }

    private func armStallTimer() {
        stallTimer = loop.schedule(after: Self.stallCheckInterval) { [unowned self] in
            self.stallTimer = nil
            self.checkStalled()
        }
    }

    /// Stalled connections whose answers have drained to half the bound go on; one whose unsent
    /// bytes have not moved for the idle timeout is closed (libmicrohttpd times out no suspended
    /// connection).
    private func checkStalled() {
        let now = loop.now
        for connection in stalled {
            guard let entry = open[connection] else {
                stalled.remove(connection)
                continue
            }
            let unsent = Self.unsentBytes(entry.fd)
            if entry.closing || unsent <= Self.maximumUnsentBytes / 2 {
                unstall(connection)
            } else if unsent != entry.stalledUnsent {
                entry.stalledUnsent = unsent
                entry.stalledUnmovedSince = now
            } else if limits.idle > 0, now - entry.stalledUnmovedSince >= Double(limits.idle) {
                shutDown(entry)
                unstall(connection)
            }
        }
        if !stalled.isEmpty { armStallTimer() }
    }

    /// Its request is complete (or answered before its body): nothing more is awaited.
    func requestComplete(_ connection: OpaquePointer) {
        open[connection]?.awaitingSince = nil
    }

    private func shutDown(_ entry: OpenConnection) {
        entry.awaitingSince = nil  // once
        entry.closing = true
        shutdown(entry.fd, Int32(SHUT_RDWR))
    }

    /// The request was answered (or abandoned): the next one's headers are awaited.
    func requestEnded(_ connection: OpaquePointer) {
        guard let entry = open[connection], !entry.closing else { return }
        entry.stream = nil
        entry.awaitingSince = loop.iterationTime
    }

    /// `EPOLLRDHUP` on a connection (level-triggered: seen once, then unwatched).
    private func peerClosed(_ connection: OpaquePointer, _ entry: OpenConnection) {
        if entry.watched {
            loop.unregister(entry.fd)
            entry.watched = false
        }
        run()  // whatever libmicrohttpd has yet to read, answer or close, first
        guard open[connection] === entry else { return }
        if let stream = entry.stream { return stream.cut() }  // nobody to send events to
        guard entry.awaitingSince != nil else { return }
        var byte: UInt8 = 0
        // Nothing left unread and the input ended: libmicrohttpd would wait for nothing.
        if recv(entry.fd, &byte, 1, Int32(MSG_PEEK) | Int32(MSG_DONTWAIT)) == 0 {
            shutdown(entry.fd, Int32(SHUT_RDWR))
        }
    }

    private func armReadTimer(at deadline: Double) {
        readTimer = loop.schedule(at: deadline) { [unowned self] in
            self.readTimer = nil
            self.closeSlowConnections()
        }
    }

    /// Shuts down every connection that has waited `requestRead` seconds for its request's
    /// headers (libmicrohttpd then closes it), and arms the timer for the next one due.
    private func closeSlowConnections() {
        let now = loop.now
        var next: Double?
        for entry in open.values {
            guard let since = entry.awaitingSince else { continue }
            let due = since + limits.requestRead
            if due <= now {
                shutDown(entry)
                onRequestTimeout()
            } else {
                next = min(next ?? due, due)
            }
        }
        if !open.isEmpty { armReadTimer(at: next ?? now + limits.requestRead) }
        run()
    }
}
