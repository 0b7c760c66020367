import AgentPosix
import MicroHTTPD
import Glibc

/// One open HTTP connection, as the agent keeps track of it beside libmicrohttpd.
final class OpenConnection {
    let fd: Int32
    /// Since when the connection has been waiting for a request's headers (its opening,
    /// or its previous answer); nil while a request is being read or answered.
    var awaitingSince: Double?
    /// Its descriptor is in our loop, watched for the peer's end of input.
    var watched = false

    init(fd: Int32, awaitingSince: Double) {
        self.fd = fd
        self.awaitingSince = awaitingSince
    }
}

/// The connections' bookkeeping: `RequestReadTimeout`, and the peer's end of input that
/// libmicrohttpd can miss.
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
        let fd = pw_mhd_connection_fd(connection)
        let entry = OpenConnection(fd: fd, awaitingSince: loop.iterationTime)
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

    func headersArrived(_ connection: OpaquePointer) {
        open[connection]?.awaitingSince = nil
    }

    /// The request was answered (or abandoned): the next one's headers are awaited.
    func requestEnded(_ connection: OpaquePointer) {
        open[connection]?.awaitingSince = loop.iterationTime
    }

    /// `EPOLLRDHUP` on a connection (level-triggered: seen once, then unwatched).
    private func peerClosed(_ connection: OpaquePointer, _ entry: OpenConnection) {
        if entry.watched {
            loop.unregister(entry.fd)
            entry.watched = false
        }
        run()  // whatever libmicrohttpd has yet to read, answer or close, first
        guard open[connection] === entry, entry.awaitingSince != nil else { return }
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
                entry.awaitingSince = nil  // once
                shutdown(entry.fd, Int32(SHUT_RDWR))
                onRequestTimeout()
            } else {
                next = min(next ?? due, due)
            }
        }
        if !open.isEmpty { armReadTimer(at: next ?? now + limits.requestRead) }
        run()
    }
}
