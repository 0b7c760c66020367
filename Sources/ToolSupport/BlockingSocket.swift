import AgentPosix
import Glibc

/// What the blocking socket clients (`LineClient`, `LoopbackHTTP`) share: a bounded read and
/// a write that finishes.
public enum BlockingSocket {
    /// Bounds each read (`SO_RCVTIMEO`); 0 or less: no bound.
    public static func setReceiveTimeout(_ fd: Int32, _ seconds: Double) {
        setTimeout(fd, SO_RCVTIMEO, seconds)
    }

    /// Bounds each write (`SO_SNDTIMEO`); 0 or less: no bound.
    public static func setSendTimeout(_ fd: Int32, _ seconds: Double) {
        setTimeout(fd, SO_SNDTIMEO, seconds)
    }

    private static func setTimeout(_ fd: Int32, _ option: Int32, _ seconds: Double) {
        var tv = timeval()
        if seconds > 0 {
            tv.tv_sec = Int(seconds)
            tv.tv_usec = Int((seconds - Double(Int(seconds))) * 1_000_000)
        }
        _ = setsockopt(fd, SOL_SOCKET, option, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    /// A blocking TCP socket (`SOCK_CLOEXEC`, `TCP_NODELAY`) connected to `host:port`, an IPv4
    /// address (loopback unless told); `timeout` bounds the connect and every read and write
    /// (nil: no bound). The caller owns the descriptor. A `host` that is not an IPv4 address
    /// fails as `inet_pton` with `EINVAL`.
    public static func connectTCP(host: String = "127.0.0.1", port: UInt16, timeout: Double? = nil) throws(PosixError) -> Int32 {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else { throw PosixError(errno: EINVAL, call: "inet_pton", path: host) }
        let fd = try retryingEINTR("socket") { Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        if let timeout {
            setReceiveTimeout(fd, timeout)
            setSendTimeout(fd, timeout)
        }
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        if connected != 0 {
            let code = errno
            close(fd)
            throw PosixError(errno: code, call: "connect", path: "\(host):\(port)")
        }
        return fd
    }

    /// Writes all of `bytes`, retrying short writes and `EINTR` (`MSG_NOSIGNAL`: a vanished
    /// peer is `EPIPE`, not SIGPIPE).
    public static func sendAll(_ fd: Int32, _ bytes: [UInt8]) throws(PosixError) {
        var offset = 0
        while offset < bytes.count {
            let n = try retryingEINTR("send") {
                bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            }
            if n == 0 { throw PosixError(errno: EPIPE, call: "send") }
            offset += n
        }
    }
}
