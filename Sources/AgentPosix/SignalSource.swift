import Glibc

/// Signals delivered through a `signalfd` to a handler on an `EventLoop`.
///
/// A signalfd only sees signals that are blocked: call
/// `SignalSource.block(_:)` at process start, before any thread exists (every
/// thread inherits the mask), so that no thread takes the default action.
/// The source then reports both process-directed signals (`kill`) and those
/// directed at the loop thread. Loop thread only.
public final class SignalSource {
    private let loop: EventLoop
    private var descriptor: FileDescriptor?
    private let fd: Int32
    private let handler: (Int32) -> Void

    /// Blocks `signals` for the calling thread (and the threads it creates
    /// afterwards) with `pthread_sigmask`.
    public static func block(_ signals: [Int32]) throws(PosixError) {
        var set = sigset_t()
        sigemptyset(&set)
        for signal in signals { sigaddset(&set, signal) }
        let result = pthread_sigmask(SIG_BLOCK, &set, nil)
        if result != 0 { throw PosixError(errno: result, call: "pthread_sigmask") }
    }

    /// Starts delivering `signals` (already blocked) to `handler`.
    public init(loop: EventLoop, signals: [Int32], handler: @escaping (Int32) -> Void) throws(PosixError) {
        var set = sigset_t()
        sigemptyset(&set)
        for signal in signals { sigaddset(&set, signal) }
        let raw = try retryingEINTR("signalfd") { Linux.signalFD(-1, &set, O_CLOEXEC | O_NONBLOCK) }
        self.loop = loop
        self.descriptor = FileDescriptor(raw)
        self.fd = raw
        self.handler = handler
        try loop.register(raw, interest: .read) { [unowned self] _ in self.readSignals() }
    }

    deinit {
        if descriptor != nil { loop.unregister(fd) }
    }

    /// Stops delivery and closes the signalfd (the signals stay blocked).
    public func cancel() {
        guard descriptor != nil else { return }
        loop.unregister(fd)
        descriptor = nil
    }

    private func readSignals() {
        let size = Linux.signalfdSiginfoSize
        var info = (UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0),
                    UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        while descriptor != nil {
            let count = withUnsafeMutableBytes(of: &info) { Glibc.read(fd, $0.baseAddress, size) }
            if count == -1 && errno == EINTR { continue }
            guard count == size else { return }  // EAGAIN: all read
            let signal = withUnsafeBytes(of: &info) { $0.load(fromByteOffset: 0, as: UInt32.self) }
            handler(Int32(bitPattern: signal))
        }
    }
}
