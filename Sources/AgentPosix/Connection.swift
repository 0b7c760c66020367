import Glibc

/// A nonblocking stream connection driven by an `EventLoop`.
///
/// Input: one `read` of up to 64 KiB per readiness event, into the loop's
/// shared buffer; the bytes go to `onInput` as they came (framing is the
/// owner's business) and are valid only during that call.
///
/// Output: `send` appends to a buffer that is flushed once at the end of the
/// loop iteration, so many answers queued while handling one read leave in
/// one `send` syscall. Write readiness is watched only while output is
/// pending. A client that lets more than `maxPendingOutput` bytes pile up is
/// closed (`.backpressure`): a slow reader never grows memory without bound.
///
/// End of input: by default the connection closes once its pending output is
/// written (a client that sends requests and shuts down its writing side
/// still gets its answers). An owner with answers still to come sets
/// `onReadEOF` and calls `closeAfterFlush()` when they are queued.
///
/// Loop thread only. An open connection is kept alive by its loop
/// registration (no need to hold it elsewhere); after close the handlers are
/// dropped, breaking any reference cycle through them.
public final class Connection {
    public enum CloseReason: Sendable, Equatable, CustomStringConvertible {
        /// `close()` by the owner.
        case local
        /// The peer closed (end of input, then output written or undeliverable).
        case eof
        /// More than `maxPendingOutput` bytes waited for a reader.
        case backpressure
        /// No input for the idle timeout.
        case idleTimeout
        /// A read or write failed (`ECONNRESET`, `EPIPE`, …).
        case error(PosixError)

        public var description: String {
            switch self {
            case .local: "closed"
            case .eof: "peer closed"
            case .backpressure: "output backlog exceeded"
            case .idleTimeout: "idle timeout"
            case .error(let error): error.description
            }
        }
    }

    public let loop: EventLoop
    /// The descriptor number (for logs and `peerCredentials`); closed once
    /// `isOpen` is false.
    public let fd: Int32
    public let maxPendingOutput: Int

    /// The bytes of one read; valid only during the call.
    public var onInput: (UnsafeRawBufferPointer) -> Void = { _ in }
    /// The peer shut down its writing side. Nil (default): close after the
    /// pending output is written.
    public var onReadEOF: (() -> Void)?
    /// Called once, after the descriptor is closed.
    public var onClose: (CloseReason) -> Void = { _ in }
    /// While `readingPaused`: called when every queued byte has been written.
    public var onOutputDrained: (() -> Void)?

    /// Back-pressure: while true nothing is read (the peer's bytes wait in the socket);
    /// an end of the peer's both directions still closes the connection.
    public var readingPaused = false {
        didSet { if readingPaused != oldValue { updateInterest() } }
    }

    private var descriptor: FileDescriptor?
    private var output: [UInt8] = []
    private var outputStart = 0
    private var flushScheduled = false
    private var inputOpen = true
    private var closeWhenDrained = false
    private var interest: EventLoop.Interest = .read
    private var idleTimeout: Double?
    private var lastInput: Double
    private var idleTimer: EventLoop.TimerHandle?

    /// Takes ownership of `descriptor`, a connected nonblocking stream socket.
    /// Call `start()` once the handlers are set.
    public init(loop: EventLoop, descriptor: consuming FileDescriptor, maxPendingOutput: Int = 8 << 20) {
        self.loop = loop
        self.fd = descriptor.rawValue
        self.maxPendingOutput = maxPendingOutput
        self.lastInput = loop.iterationTime
        self.descriptor = consume descriptor
    }

    deinit {
        if let idleTimer { loop.cancel(idleTimer) }
    }

    /// Starts reading. On failure the connection is closed and the error
    /// thrown (`onClose` is not called).
    public func start() throws(PosixError) {
        do {
            try loop.register(fd, interest: interest) { [self] events in handle(events) }
        } catch {
            descriptor = nil
            throw error
        }
    }

    public var isOpen: Bool { descriptor != nil }

    /// How many `send` syscalls this connection has made (tests and
    /// benchmarks: answers queued together must leave together).
    public private(set) var sendSyscalls = 0

    /// Bytes queued and not yet written.
    public var pendingOutputBytes: Int { output.count - outputStart }

    // MARK: Output

    /// Queues `bytes`; they are written at the end of this loop iteration
    /// (or when the socket can take them). Ignored once closed or closing.
    public func send(_ bytes: UnsafeRawBufferPointer) {
        guard acceptsOutput else { return }
        if output.capacity == 0 { output = loop.takeOutputBuffer() }
        output.append(contentsOf: bytes)
        queued()
    }

    /// Queues `bytes` (e.g. `[UInt8]`, `ArraySlice<UInt8>`, `Data`,
    /// `String.UTF8View`).
    public func send<Bytes: Sequence>(_ bytes: Bytes) where Bytes.Element == UInt8 {
        guard acceptsOutput else { return }
        if output.capacity == 0 { output = loop.takeOutputBuffer() }
        output.append(contentsOf: bytes)
        queued()
    }

    private var acceptsOutput: Bool { descriptor != nil && !closeWhenDrained }

    private func queued() {
        if pendingOutputBytes > maxPendingOutput {
            flush()
            if descriptor != nil, pendingOutputBytes > maxPendingOutput {
                close(reason: .backpressure)
            }
            return
        }
        if !flushScheduled {
            flushScheduled = true
            loop.deferFlush(self)
        }
    }

    /// The end of the loop iteration in which output was queued (`EventLoop.deferFlush`).
    func flushDeferred() {
        flushScheduled = false
        flush()
    }

    /// Writes what is queued now, as far as the socket takes it.
    public func flush() {
        guard descriptor != nil else { return }
        while pendingOutputBytes > 0 {
            let wanted = pendingOutputBytes
            sendSyscalls += 1
            let written = output.withUnsafeBytes { raw in
                Glibc.send(fd, raw.baseAddress! + outputStart, wanted, Int32(MSG_NOSIGNAL) | Int32(MSG_DONTWAIT))
            }
            if written >= 0 {
                outputStart += written
                if written < wanted {
                    // The socket buffer is full; another send would only
                    // return EAGAIN. Wait for write readiness.
                    compactOutput()
                    updateInterest()
                    return
                }
                continue
            }
            switch errno {
            case EINTR:
                continue
            case EAGAIN, EWOULDBLOCK:
                updateInterest()
                return
            case let code:
                close(reason: .error(PosixError(errno: code, call: "send")))
                return
            }
        }
        // Everything written. The buffer goes back to the loop for the next connection that
        // queues output, so a connection holds one only while it has output waiting: 256
        // clients held 256 buffers between their requests, now the loop keeps as many as one
        // iteration used (at most one per event of an `epoll_wait`). A larger buffer than 4 KiB
        // (16 pipelined isEnabled answers take 2 KiB; a `status` more) is freed, so a client
        // that once fell behind, or was sent large answers, leaves no large buffer behind.
        loop.giveBackOutputBuffer(&output)
        outputStart = 0
        if closeWhenDrained {
            close(reason: inputOpen ? .local : .eof)
            return
        }
        updateInterest()
        if readingPaused, let onOutputDrained { onOutputDrained() }
    }

    private func compactOutput() {
        // Drop what was written once it is most of the buffer.
        if outputStart >= 64 * 1024, outputStart * 2 >= output.count {
            output.removeFirst(outputStart)
            outputStart = 0
        }
    }

    private func updateInterest() {
        guard descriptor != nil else { return }
        var wanted: EventLoop.Interest = []
        if inputOpen, !readingPaused { wanted.insert(.read) }
        if pendingOutputBytes > 0 { wanted.insert(.write) }
        guard wanted != interest else { return }
        do {
            try loop.modify(fd, interest: wanted)
            interest = wanted
        } catch {
            close(reason: .error(error))
        }
    }

    // MARK: Closing

    /// Closes now; pending output is dropped.
    public func close() { close(reason: .local) }

    /// Stops accepting output and closes once what is queued is written.
    public func closeAfterFlush() {
        guard descriptor != nil, !closeWhenDrained else { return }
        closeWhenDrained = true
        if pendingOutputBytes == 0 {
            close(reason: inputOpen ? .local : .eof)
        } else if !flushScheduled {
            flush()
        }
    }

    private func close(reason: CloseReason) {
        guard descriptor != nil else { return }
        loop.unregister(fd)
        descriptor = nil
        if let idleTimer {
            loop.cancel(idleTimer)
            self.idleTimer = nil
        }
        output = []
        outputStart = 0
        let onClose = self.onClose
        self.onInput = { _ in }
        self.onReadEOF = nil
        self.onOutputDrained = nil
        self.onClose = { _ in }
        onClose(reason)
    }

    // MARK: Idle timeout

    /// Closes the connection (`.idleTimeout`) after `seconds` without input;
    /// nil turns it off. Input only stamps a time; the one timer checks the
    /// stamp when it fires and moves itself forward.
    public func setIdleTimeout(_ seconds: Double?) {
        if let idleTimer {
            loop.cancel(idleTimer)
            self.idleTimer = nil
        }
        idleTimeout = seconds
        guard let seconds, descriptor != nil else { return }
        lastInput = loop.iterationTime
        armIdleTimer(at: lastInput + seconds)
    }

    private func armIdleTimer(at deadline: Double) {
        // Unowned, not weak: the timer is cancelled by `close` and by `deinit`, so it never runs
        // without its connection; and a weak reference would give every connection a side table,
        // through which each retain and release on the read path then went (the slow path).
        idleTimer = loop.schedule(at: deadline) { [unowned self] in
            guard let timeout = self.idleTimeout, self.descriptor != nil else { return }
            self.idleTimer = nil
            let due = self.lastInput + timeout
            if self.loop.now >= due {
                self.close(reason: .idleTimeout)
            } else {
                self.armIdleTimer(at: due)
            }
        }
    }

    // MARK: Events

    private func handle(_ events: EventLoop.Events) {
        if events.contains(.writable) {
            flush()
            guard descriptor != nil else { return }
        }
        if inputOpen, !readingPaused {
            if !events.isDisjoint(with: [.readable, .hangup, .error]) { readOnce() }
        } else if !events.isDisjoint(with: [.hangup, .error]) {
            // Input ended earlier and now the peer is gone entirely:
            // nothing can be delivered any more.
            close(reason: .eof)
        }
    }

    private func readOnce() {
        let buffer = loop.readBuffer
        while true {
            let count = Glibc.read(fd, buffer.baseAddress, buffer.count)
            if count > 0 {
                if idleTimeout != nil { lastInput = loop.iterationTime }
                onInput(UnsafeRawBufferPointer(start: buffer.baseAddress, count: count))
                return
            }
            if count == 0 {
                inputOpen = false
                updateInterest()
                guard descriptor != nil else { return }
                if let onReadEOF {
                    onReadEOF()
                } else {
                    closeAfterFlush()
                }
                return
            }
            switch errno {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK: return
            case let code:
                close(reason: .error(PosixError(errno: code, call: "read")))
                return
            }
        }
    }
}

extension EventLoop {
    /// An empty output buffer: one a connection gave back, or a new one.
    func takeOutputBuffer() -> [UInt8] { outputBuffers.popLast() ?? [] }

    /// Takes `buffer` (leaving it empty, without storage) and keeps it for `takeOutputBuffer`,
    /// unless it is larger than 4 KiB or as many as an iteration's events are kept already.
    func giveBackOutputBuffer(_ buffer: inout [UInt8]) {
        if buffer.capacity <= 4 * 1024, outputBuffers.count < Int(maxEvents) {
            buffer.removeAll(keepingCapacity: true)
            outputBuffers.append(buffer)
        }
        buffer = []
    }
}
