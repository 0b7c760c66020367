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
/// are served while any number of slow clients wait. A new connection is refused only when
/// every connection is being answered (or carries an event stream).
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
        guard let entry = open.removeValue(forKey: connection) else { return }
        if entry.watched { loop.unregister(entry.fd) }
        if open.isEmpty, let readTimer {
            loop.cancel(readTimer)
            self.readTimer = nil
        }
    }

    /// The accept policy: room for one more, if need be by evicting the connection that has
    /// waited longest for its request.
    func admit() -> Bool {
        var live = open.count
        if live >= limits.connections { live -= open.values.lazy.filter(\.closing).count }
        if live < limits.connections { return true }
        var oldest: OpenConnection?
        var oldestSince = Double.infinity
        for entry in open.values where !entry.closing {
            guard let since = entry.awaitingSince else { continue }
            if since < oldestSince || (since == oldestSince && entry.serial < oldest?.serial ?? .max) {
                oldest = entry
                oldestSince = since
            }
        }
        guard let oldest else {
            onRefused()
            return false
        }
        shutDown(oldest)
        onEvicted()
        return true
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
