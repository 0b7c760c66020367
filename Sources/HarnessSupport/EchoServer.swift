import AgentPosix
/// A minimal line-echo server on this layer: every complete line a client
/// sends comes back unchanged, written once per read. It is the baseline the
/// daemon's benchmark compares the flag API with (same loop, listener and
/// connections; no JSON), so it does as little as a real server could.
///
/// Loop thread only (create it before `run()` or from posted work).
public final class EchoServer {
    public let listener: UnixListener
    public private(set) var connectionCount = 0
    private let loop: EventLoop

    public init(loop: EventLoop, path: String) throws(UnixSocketError) {
        self.loop = loop
        self.listener = try UnixListener(path: path, mode: 0o600)
    }

    public func start() throws(PosixError) {
        try listener.start(on: loop) { [unowned self] descriptor in
            let connection = Connection(loop: self.loop, descriptor: descriptor)
            var partial: [UInt8] = []
            connection.onInput = { [unowned connection] bytes in
                // Echo up to the last newline; keep the unfinished line.
                guard let last = bytes.lastIndex(of: UInt8(ascii: "\n")) else {
                    partial.append(contentsOf: bytes)
                    return
                }
                if !partial.isEmpty {
                    connection.send(partial)
                    partial.removeAll(keepingCapacity: true)
                }
                connection.send(UnsafeRawBufferPointer(rebasing: bytes[...last]))
                if last + 1 < bytes.count {
                    partial.append(contentsOf: bytes[(last + 1)...])
                }
            }
            connection.onClose = { [unowned self] _ in self.connectionCount -= 1 }
            do {
                try connection.start()
                self.connectionCount += 1
            } catch {
                // The client is gone already; nothing to serve.
            }
        }
    }

    public func close() { listener.close() }
}
