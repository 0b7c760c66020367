import Glibc

/// A listening TCP socket, as the agent's HTTP interface (`Listen=` on loopback) and the
/// emulator (`--listen`) open one before handing it to libmicrohttpd.
public enum TCPListener {
    /// A socket listening on `host`, an IPv4 or IPv6 address literal (IPv6: `IPV6_V6ONLY`),
    /// and `port` (0: the kernel picks one): nonblocking, close-on-exec, `SO_REUSEADDR`, and
    /// `TCP_NODELAY`, which accepted sockets inherit on Linux (no Nagle and delayed-ACK
    /// stalls). Returns the descriptor, which the caller owns, and the port it is bound to.
    public static func listen(host: String, port: UInt16, backlog: Int32) throws(PosixError) -> (fd: Int32, port: UInt16) {
        var v4 = sockaddr_in(), v6 = sockaddr_in6()
        let ipv6: Bool
        if inet_pton(AF_INET, host, &v4.sin_addr) == 1 {
            ipv6 = false
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = port.bigEndian
        } else if inet_pton(AF_INET6, host, &v6.sin6_addr) == 1 {
            ipv6 = true
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = port.bigEndian
        } else {
            throw PosixError(errno: EINVAL, call: "inet_pton", path: host)
        }
        let type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue)
        let fd = try retryingEINTR("socket") { socket(ipv6 ? AF_INET6 : AF_INET, type, 0) }
        var one: Int32 = 1
        let size = socklen_t(MemoryLayout<Int32>.size)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, size)
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, size)
        if ipv6 { setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, size) }
        let bound = ipv6
            ? withUnsafePointer(to: &v6) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) } }
            : withUnsafePointer(to: &v4) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0 else { throw failed(fd, "bind") }
        guard Glibc.listen(fd, backlog) == 0 else { throw failed(fd, "listen") }
        // sin_port and sin6_port stand at the same offset.
        var storage = sockaddr_in6()
        var length = socklen_t(MemoryLayout<sockaddr_in6>.size)
        _ = withUnsafeMutablePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        return (fd, UInt16(bigEndian: storage.sin6_port))
    }

    private static func failed(_ fd: Int32, _ call: String) -> PosixError {
        let error = PosixError(errno: errno, call: call)
        close(fd)
        return error
    }
}
