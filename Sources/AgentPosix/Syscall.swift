import Glibc

/// A failed system call: the `errno` it set, the call's name, and what the
/// failure was about (a path, when there is one).
///
/// `errno` is the stable code; compare it with the `E…` constants.
public struct PosixError: Error, Equatable, Sendable, CustomStringConvertible {
    public let errno: Int32
    /// The name of the failed call, e.g. `"bind"`.
    public let call: String
    /// The path the call was about, if any (named in the description).
    public let path: String?

    public init(errno: Int32, call: String, path: String? = nil) {
        self.errno = errno
        self.call = call
        self.path = path
    }

    /// `strerror(errno)`.
    public var message: String { String(cString: strerror(errno)) }

    public var description: String {
        if let path { return "\(call) \(path): \(message) (errno \(errno))" }
        return "\(call): \(message) (errno \(errno))"
    }
}

/// Runs `body`, a system call that returns `-1` and sets `errno` on failure;
/// retries it while it fails with `EINTR`, throws `PosixError` otherwise.
///
/// Never use it for `close`: on Linux a `close` interrupted by a signal has
/// released the descriptor anyway, and retrying could close someone else's.
@inline(__always)
@discardableResult
public func retryingEINTR<T: FixedWidthInteger>(
    _ call: StaticString, path: String? = nil, _ body: () -> T
) throws(PosixError) -> T {
    while true {
        let result = body()
        if result != -1 { return result }
        let code = Glibc.errno
        if code == EINTR { continue }
        throw PosixError(errno: code, call: "\(call)", path: path)
    }
}

/// An owned file descriptor: closed when the value goes out of scope, unless
/// `take()` hands the number over to someone else.
public struct FileDescriptor: ~Copyable, Sendable {
    public let rawValue: Int32

    /// Takes ownership of `rawValue`.
    public init(_ rawValue: Int32) {
        precondition(rawValue >= 0, "invalid file descriptor \(rawValue)")
        self.rawValue = rawValue
    }

    /// Gives up ownership without closing; the caller now owns the number.
    public consuming func take() -> Int32 {
        let fd = rawValue
        discard self
        return fd
    }

    deinit {
        _ = Glibc.close(rawValue)
    }
}

extension FileDescriptor {
    /// Sets `O_NONBLOCK` and `FD_CLOEXEC` (for descriptors that were not
    /// created with them, e.g. from `accept` or socket activation).
    public func setNonBlockingAndCloseOnExec() throws(PosixError) {
        try Self.setNonBlockingAndCloseOnExec(rawValue)
    }

    public static func setNonBlockingAndCloseOnExec(_ fd: Int32) throws(PosixError) {
        let flags = try retryingEINTR("fcntl(F_GETFL)") { fcntl(fd, F_GETFL) }
        if flags & O_NONBLOCK == 0 {
            try retryingEINTR("fcntl(F_SETFL)") { fcntl(fd, F_SETFL, flags | O_NONBLOCK) }
        }
        let fdFlags = try retryingEINTR("fcntl(F_GETFD)") { fcntl(fd, F_GETFD) }
        if fdFlags & FD_CLOEXEC == 0 {
            try retryingEINTR("fcntl(F_SETFD)") { fcntl(fd, F_SETFD, fdFlags | FD_CLOEXEC) }
        }
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds: the one reading of the monotonic clock (the benchmarks'
/// latencies, systemd's `MONOTONIC_USEC=`, and `monotonicSeconds`).
@inline(__always)
public func monotonicNanoseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
}

/// `CLOCK_MONOTONIC` in seconds: the time base of `EventLoop` deadlines.
@inline(__always)
public func monotonicSeconds() -> Double {
    Double(monotonicNanoseconds()) / 1_000_000_000
}

/// Sleeps `seconds` (`nanosleep`, resumed after a signal); nothing for 0 or less.
public func sleepSeconds(_ seconds: Double) {
    guard seconds > 0 else { return }
    var request = timespec(tv_sec: Int(seconds), tv_nsec: Int((seconds - Double(Int(seconds))) * 1e9))
    var remaining = timespec()
    while nanosleep(&request, &remaining) == -1 && errno == EINTR { request = remaining }
}

/// Ignores `SIGPIPE` for the whole process, so that writing to a socket whose
/// peer has gone returns `EPIPE` instead of killing the process. `Connection`
/// uses `send(MSG_NOSIGNAL)` and does not need it; call it once at start for
/// any other writes (pipes, `FileHandle`).
public func ignoreSIGPIPE() {
    _ = signal(SIGPIPE, SIG_IGN)
}

/// Writes `bytes` to the file at `path`, created (with `mode`) or truncated; every byte, or
/// an error naming the call and the path.
public func writeWholeFile(_ path: String, _ bytes: [UInt8], mode: mode_t = 0o644) throws(PosixError) {
    let fd = try retryingEINTR("open", path: path) { open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode) }
    defer { close(fd) }
    var offset = 0
    while offset < bytes.count {
        offset += try retryingEINTR("write", path: path) {
            bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }
        }
    }
}

/// The whole content of the file at `path` (`open`, `read` until end of file, `close`), in
/// one buffer sized from `fstat` (a 500 MB file costs 500 MB, not the doublings of a growing
/// array). Errors name the call and the path, e.g. `open /etc/x: No such file or directory (errno 2)`.
public func readWholeFile(_ path: String) throws(PosixError) -> [UInt8] {
    let fd = try retryingEINTR("open", path: path) { open(path, O_RDONLY | O_CLOEXEC) }
    defer { close(fd) }
    var bytes: [UInt8] = []
    var info = stat()
    if fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_size > 0 { bytes.reserveCapacity(Int(info.st_size)) }
    var chunk = [UInt8](repeating: 0, count: 64 * 1024)
    while true {
        let n = try retryingEINTR("read", path: path) {
            chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        }
        if n == 0 { return bytes }
        bytes.append(contentsOf: chunk[..<n])
    }
}
