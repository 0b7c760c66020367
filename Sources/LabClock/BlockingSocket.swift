import Glibc

/// What blocking socket clients (the loopback HTTP client, the test harnesses' line client)
/// share: a bounded read and a write that finishes.
public enum BlockingSocket {
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public var description: String
        public init(_ description: String) { self.description = description }
    }

    /// Bounds each read (`SO_RCVTIMEO`).
    public static func setReceiveTimeout(_ fd: Int32, _ seconds: Double) {
        var tv = timeval(tv_sec: Int(seconds), tv_usec: Int((seconds - Double(Int(seconds))) * 1e6))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Writes all of `bytes`, retrying short writes and `EINTR`.
    public static func sendAll(_ fd: Int32, _ bytes: [UInt8]) throws(Failure) {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            if n < 0 {
                if errno == EINTR { continue }
                throw Failure("send: \(String(cString: strerror(errno)))")
            }
            if n == 0 { throw Failure("send: nothing written") }
            offset += n
        }
    }
}
