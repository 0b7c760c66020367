import Dispatch
import EmulatorCore
import Glibc
import MicroHTTPD
import Synchronization

/// How an answer goes out (docs/emulator.md D.3's body faults): whole, truncated after N
/// bytes of body, stalled after the headers, or not at all with a TCP reset.
extension EmulatorServer {
    /// A stalled connection is closed after this long if the client has not given up.
    static let maxStallSeconds = 300

    func send(_ response: EmulatorResponse, _ delivery: Outcome.Delivery, on connection: OpaquePointer) -> MHD_Result {
        switch delivery {
        case .normal:
            return MicroHTTPD.respond(connection, status: response.status, headers: response.headers.map { ($0.name, $0.value) },
                                      body: response.body)
        case .reset:
            return reset(connection)
        case .truncate(let n):
            let box = Unmanaged.passRetained(TruncatedBody(bytes: response.body, limit: n)).toOpaque()
            let reader: MHD_ContentReaderCallback = { cls, pos, buf, max in
                let body = Unmanaged<TruncatedBody>.fromOpaque(cls!).takeUnretainedValue()
                let start = Int(pos)
                guard start < body.limit, start < body.bytes.count else { return -2 }  // MHD_CONTENT_READER_END_WITH_ERROR: close
                let n = min(max, body.limit - start, body.bytes.count - start)
                body.bytes.withUnsafeBytes { UnsafeMutableRawPointer(buf!).copyMemory(from: $0.baseAddress! + start, byteCount: n) }
                return n
            }
            return queue(response, size: UInt64(response.body.count), reader: reader, box: box,
                         free: { Unmanaged<TruncatedBody>.fromOpaque($0!).release() }, on: connection)
        case .stall:
            let box = Unmanaged.passRetained(StalledBody(server: self, connection: Handle(raw: connection))).toOpaque()
            let reader: MHD_ContentReaderCallback = { cls, _, _, _ in
                let body = Unmanaged<StalledBody>.fromOpaque(cls!).takeUnretainedValue()
                // First call (the headers are out): suspend, so the event loop is not busy-called.
                // Called again only once resumed (stop, or the stall's end): close.
                guard body.stalled.exchange(true, ordering: .acquiringAndReleasing) == false else { return -2 }
                return body.server.stall(body.connection) ? 0 : -2
            }
            return queue(response, size: UInt64(response.body.count), reader: reader, box: box,
                         free: { Unmanaged<StalledBody>.fromOpaque($0!).release() }, on: connection)
        }
    }

    private func queue(_ response: EmulatorResponse, size: UInt64, reader: MHD_ContentReaderCallback, box: UnsafeMutableRawPointer,
                       free: MHD_ContentReaderFreeCallback, on connection: OpaquePointer) -> MHD_Result {
        guard let r = MHD.createResponseFromCallback(size, 4096, reader, box, free) else {
            free(box)
            return MHD_Result.NO
        }
        for h in response.headers { _ = MHD.addResponseHeader(r, h.name, h.value) }
        let result = MHD.queueResponse(connection, UInt32(response.status), r)
        MHD.destroyResponse(r)
        return result
    }

    /// Suspends a stalled connection (from its content reader); resumed by `stop()` or after `maxStallSeconds`.
    func stall(_ connection: Handle) -> Bool {
        let key = Self.key(connection.raw)
        let ok = runtime.withLock { r in
            if r.stopping { return false }
            MHD.suspendConnection(connection.raw)
            r.suspended[key] = connection
            return true
        }
        guard ok else { return false }
        DispatchQueue.global().asyncAfter(deadline: .now() + .seconds(Self.maxStallSeconds)) { [self] in
            runtime.withLock { r in
                if let c = r.suspended.removeValue(forKey: key) { MHD.resumeConnection(c.raw) }
            }
        }
        return true
    }

    /// Closes the connection with a TCP reset: SO_LINGER 0, and a disconnect
    /// (`connect(AF_UNSPEC)`) so that the RST goes out before libmicrohttpd's own
    /// shutdown could send a FIN.
    func reset(_ connection: OpaquePointer) -> MHD_Result {
        let fd = MHD.connectionFD(connection)
        if fd >= 0 {
            var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
            var unspec = sockaddr()
            unspec.sa_family = sa_family_t(AF_UNSPEC)
            _ = connect(fd, &unspec, socklen_t(MemoryLayout<sockaddr>.size))
        }
        return MHD_Result.NO
    }
}

/// The body of a `truncateAfterBytes` answer; read only by libmicrohttpd's thread for the connection.
final class TruncatedBody {
    let bytes: [UInt8]
    let limit: Int
    init(bytes: [UInt8], limit: Int) {
        self.bytes = bytes
        self.limit = limit
    }
}

/// A `stallAfterHeaders` answer: whether its connection has been suspended yet.
final class StalledBody: Sendable {
    let server: EmulatorServer
    let connection: EmulatorServer.Handle
    let stalled = Atomic<Bool>(false)
    init(server: EmulatorServer, connection: EmulatorServer.Handle) {
        self.server = server
        self.connection = connection
    }
}
