import AgentPosix
import MicroHTTPD
import Glibc

/// An answer without an end (docs/http.md F.3's event stream): bytes written to it go out on
/// its connection as libmicrohttpd asks for them (chunked), until it is finished or cut.
///
/// libmicrohttpd pulls a stream's bytes through a content-reader callback. With nothing to
/// give, the callback suspends the connection (so that libmicrohttpd does not call it again
/// at once, in a busy loop) and `write` resumes it; a suspended connection costs nothing on
/// the loop. What is written and not yet taken is bounded (`maximumPendingBytes`): a reader
/// that falls that far behind is cut, never buffered without bound. A peer that goes away is
/// seen by the server's end-of-input watch (LoopHTTPServer+Connections.swift), which cuts the
/// stream too.
final class EventStream {
    /// Unsent bytes one stream may hold: far more than the events of any burst of changes
    /// (an event is ~130 bytes), far less than what a stalled reader would cost otherwise.
    static let maximumPendingBytes = 64 * 1024

    /// Its connection, once the answer is queued on one.
    fileprivate(set) var connection: OpaquePointer?
    fileprivate weak var server: LoopHTTPServer?
    private var pending: [UInt8] = []
    private var sent = 0
    /// Suspended by the callback for want of bytes.
    fileprivate var waiting = false
    /// No more bytes: the callback ends the answer once `pending` is sent.
    private(set) var finished = false
    /// Called once, when libmicrohttpd lets go of the answer (the connection ended or the
    /// stream was finished).
    var onEnd: (() -> Void)?

    /// Appends `bytes`; a stream that would hold more than `maximumPendingBytes` unsent is cut.
    func write(_ bytes: [UInt8]) {
        guard !finished else { return }
        if pending.count - sent + bytes.count > Self.maximumPendingBytes { return cut() }
        pending.append(contentsOf: bytes)
        wake()
    }

    /// Ends the answer after what was written.
    func finish() {
        guard !finished else { return }
        finished = true
        wake()
    }

    /// Ends the connection now, unsent bytes dropped (a reader too slow, a peer gone).
    func cut() {
        finished = true
        pending = []
        sent = 0
        if let connection {
            let fd = MHD.connectionFD(connection)
            if fd >= 0 { shutdown(fd, Int32(SHUT_RDWR)) }
        }
        wake()
    }

    private func wake() {
        guard waiting, let connection, let server else { return }
        waiting = false
        server.resume(connection)
    }

    /// libmicrohttpd's content reader: up to `max` bytes into `buffer`; 0 after suspending
    /// the connection when there are none yet; the end of the answer once finished.
    fileprivate func produce(_ buffer: UnsafeMutablePointer<CChar>, _ max: Int) -> Int {
        if sent < pending.count {
            let n = min(max, pending.count - sent)
            pending.withUnsafeBufferPointer { from in
                UnsafeMutableRawPointer(buffer).copyMemory(from: from.baseAddress! + sent, byteCount: n)
            }
            sent += n
            if sent == pending.count {
                pending.removeAll(keepingCapacity: pending.capacity <= 4096)
                sent = 0
            }
            return n
        }
        if finished { return -1 }  // MHD_CONTENT_READER_END_OF_STREAM
        guard let connection, let server, server.daemon != nil else { return -2 }  // END_WITH_ERROR
        waiting = true
        server.suspendForStream(connection)
        return 0
    }
}

extension LoopHTTPServer {
    /// The libmicrohttpd answer of `stream` (status, headers, a body without an end), queued
    /// on `connection`.
    func queueStream(_ stream: EventStream, _ response: HTTPServerResponse, on connection: OpaquePointer) -> MHD_Result {
        let cls = Unmanaged.passRetained(stream).toOpaque()
        let made = MHD.createResponseFromCallback(UInt64.max, 4096, { cls, _, buffer, max in
            guard let cls, let buffer else { return -2 }
            return Unmanaged<EventStream>.fromOpaque(cls).takeUnretainedValue().produce(buffer, max)
        }, cls, { cls in
            guard let cls else { return }
            let stream = Unmanaged<EventStream>.fromOpaque(cls).takeRetainedValue()
            stream.connection = nil
            let end = stream.onEnd
            stream.onEnd = nil
            end?()
        })
        guard let made else {
            Unmanaged<EventStream>.fromOpaque(cls).release()
            return MHD_Result.NO
        }
        for h in response.headers { _ = MHD.addResponseHeader(made, h.name, h.value) }
        stream.connection = connection
        stream.server = self
        open[connection]?.stream = stream
        let result = MHD.queueResponse(connection, UInt32(response.status), made)
        MHD.destroyResponse(made)  // libmicrohttpd keeps it while the connection sends it
        return result
    }

    fileprivate func suspendForStream(_ connection: OpaquePointer) {
        streamsWaiting.insert(connection)
        MHD.suspendConnection(connection)
    }

    /// A waiting stream has bytes (or its end): libmicrohttpd takes them on its next pass,
    /// which runs now unless one is running (then right after it).
    fileprivate func resume(_ connection: OpaquePointer) {
        guard streamsWaiting.remove(connection) != nil else { return }
        MHD.resumeConnection(connection)
        runSoon()
    }
}
