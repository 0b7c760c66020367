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
