import AgentPosix
import Glibc
import Testing
import ToolSupport

/// AgentPosix's `TCPListener`: the listening socket of the agent's HTTP interface and the emulator.
@Suite struct TCPListenerTests {
    @Test("Port 0 picks a free port, returned; the socket is nonblocking and close-on-exec, and a client connects")
    func listensOnAFreePort() throws {
        let (fd, port) = try TCPListener.listen(host: "127.0.0.1", port: 0, backlog: 8)
        defer { close(fd) }
        #expect(port != 0)
        #expect(fcntl(fd, F_GETFL) & O_NONBLOCK != 0)
        #expect(fcntl(fd, F_GETFD) & FD_CLOEXEC != 0)
        let client = try BlockingSocket.connectTCP(port: port, timeout: 2)
        close(client)
    }

    @Test("::1 listens IPv6 only")
    func listensOnIPv6Loopback() throws {
        let listened: (fd: Int32, port: UInt16)
        do {
            listened = try TCPListener.listen(host: "::1", port: 0, backlog: 8)
        } catch {
            // A host without IPv6 on loopback (some containers): nothing to test.
            withKnownIssue("no IPv6 loopback here: \(error)") { throw error }
            return
        }
        defer { close(listened.fd) }
        var only: Int32 = 0
        var size = socklen_t(MemoryLayout<Int32>.size)
        getsockopt(listened.fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &only, &size)
        #expect(only == 1 && listened.port != 0)
    }

    @Test("A host that is not an address literal, and a port in use, are errors naming the call")
    func badHostAndBusyPort() throws {
        #expect(throws: PosixError(errno: EINVAL, call: "inet_pton", path: "localhost")) {
            try TCPListener.listen(host: "localhost", port: 0, backlog: 8)
        }
        let (fd, port) = try TCPListener.listen(host: "127.0.0.1", port: 0, backlog: 8)
        defer { close(fd) }
        #expect(throws: PosixError(errno: EADDRINUSE, call: "bind")) {
            try TCPListener.listen(host: "127.0.0.1", port: port, backlog: 8)
        }
    }
}
