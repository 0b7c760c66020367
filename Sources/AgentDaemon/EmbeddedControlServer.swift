import AgentCore
import AgentPosix
import Glibc

/// The control server driven by its caller, bytes in and bytes out (docs/architecture.md §11;
/// as `HTTPInterface.respond` is for the HTTP interface, and NIO's `EmbeddedChannel`): the
/// server and its agent live on a loop that nobody runs; each client is one end of a
/// socketpair whose other end the server accepted with the credentials given. `write` hands
/// a client's bytes over, `read` turns the loop until the server has nothing more to say and
/// returns what it wrote. One thread, no sleeps, no daemon.
final class EmbeddedControlServer {
    let loop: EventLoop
    let server: ControlServer
    private var ends: [Int32] = []

    init(server: ControlServer, loop: EventLoop) {
        self.loop = loop
        self.server = server
    }

    deinit {
        server.closeAll()
        for fd in ends { close(fd) }
    }

    /// A new client; nil credentials: this process's (control access).
    func connect(as credentials: PeerCredentials? = nil) throws(PosixError) -> Int {
        var fds: [Int32] = [0, 0]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0, &fds) == 0 else {
            throw PosixError(errno: errno, call: "socketpair")
        }
        ends.append(fds[0])
        if let credentials { server.accept(FileDescriptor(fds[1]), credentials: credentials) } else { server.accept(FileDescriptor(fds[1])) }
        return ends.count - 1
    }

    /// The client's bytes, as if it had written them.
    func write(_ client: Int, _ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { Glibc.write(ends[client], $0.baseAddress, $0.count) }
            if n > 0 { offset += n } else if errno != EINTR && errno != EAGAIN { return } else { try? loop.turn() }
        }
    }

    /// The client closes its writing half.
    func closeWrite(_ client: Int) { shutdown(ends[client], Int32(SHUT_WR)) }

    /// Everything the server wrote to the client once the loop has nothing ready: turns the
    /// loop (without waiting) until a turn brings no new bytes.
    func read(_ client: Int) -> [UInt8] {
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        var quietTurns = 0
        while quietTurns < 3 {
            try? loop.turn()
            var got = false
            while true {
                let n = buffer.withUnsafeMutableBytes { Glibc.read(ends[client], $0.baseAddress, $0.count) }
                guard n > 0 else { break }
                out += buffer[0..<n]
                got = true
            }
            quietTurns = got ? 0 : quietTurns + 1
        }
        return out
    }
}
