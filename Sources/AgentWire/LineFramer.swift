#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Splits a byte stream into lines (docs/socket-api.md B: one JSON value per line, `\n`
/// terminated, a trailing `\r` ignored). Framing only: it knows bytes, `\n`
/// and a maximum length, nothing about JSON (docs/architecture.md §9).
///
/// The hot path is `process(_:_:)`: complete lines inside a chunk are handed
/// to the caller as pointers into that chunk, without copying; only a partial
/// line at the end of a chunk is buffered until its `\n` arrives.
///
/// A line longer than `maximumLineLength` bytes (not counting `\n` and a
/// trailing `\r`) produces `.lineTooLong`, after which the framer is failed:
/// it reports nothing more and the caller answers -32600 and closes the
/// connection. At most `maximumLineLength + 1` bytes are ever buffered.
public struct LineFramer: Sendable {
    /// docs/socket-api.md B: a line over 1 MiB is refused.
    public static let defaultMaximumLineLength = 1 << 20

    /// One framing event, borrowed: the pointer is valid only during the callback.
    public enum Frame {
        case line(UnsafeRawBufferPointer)
        case lineTooLong
    }

    /// One framing event, owned (the convenient, copying API).
    public enum Event: Sendable, Equatable {
        case line([UInt8])
        case lineTooLong
    }

    public let maximumLineLength: Int
    /// The start of a line whose `\n` has not arrived yet.
    private var pending: [UInt8] = []
    /// True after `.lineTooLong`: nothing more is reported.
    public private(set) var isFailed = false

    public init(maximumLineLength: Int = LineFramer.defaultMaximumLineLength) {
        precondition(maximumLineLength > 0, "maximumLineLength must be positive, got \(maximumLineLength)")
        self.maximumLineLength = maximumLineLength
    }

    /// Bytes of an incomplete line held until its `\n` arrives.
    public var bufferedByteCount: Int { pending.count }

    /// Bytes received after a `processWhile(_:_:)` stopped: lines not yet handed out
    /// (`resume` hands them out).
    private var held: [UInt8] = []

    /// Whether a stopped `processWhile(_:_:)` left bytes for `resume`.
    public var hasHeldLines: Bool { !held.isEmpty }

    /// Feeds one chunk; `body` gets every complete line in order, then at most
    /// one `.lineTooLong` (after which the framer is failed).
    public mutating func process(
        _ chunk: UnsafeRawBufferPointer, _ body: (Frame) throws -> Void
    ) rethrows {
        try processWhile(chunk) { frame in
            try body(frame)
            return true
        }
    }

    /// Feeds one chunk, handing out lines while `body` returns true: once it returns
    /// false, the rest of the chunk is held (copied) until `resume` (back-pressure and
    /// fairness: a reader can stop between two lines). A chunk fed while lines are held
    /// is held after them.
    public mutating func processWhile(
        _ chunk: UnsafeRawBufferPointer, _ body: (Frame) throws -> Bool
    ) rethrows {
        guard held.isEmpty else {
            held.append(contentsOf: chunk)
            return
        }
        try frame(chunk, body)
    }

    /// Hands out the held lines while `body` returns true (what is left stays held).
    public mutating func resume(_ body: (Frame) throws -> Bool) rethrows {
        guard !held.isEmpty else { return }
        let bytes = held
        held = []
        try bytes.withUnsafeBytes { chunk in try frame(chunk, body) }
    }

    private mutating func frame(_ chunk: UnsafeRawBufferPointer, _ body: (Frame) throws -> Bool) rethrows {
        guard !isFailed, let base = chunk.baseAddress, chunk.count > 0 else { return }
        let count = chunk.count
        var start = 0
        var goOn = true

        if !pending.isEmpty {
            guard let nl = Self.newline(in: base, from: 0, to: count) else {
                if pending.count + count > maximumLineLength + 1 {
                    return try fail(body)
                }
                pending.append(contentsOf: UnsafeRawBufferPointer(start: base, count: count))
                return
            }
            pending.append(contentsOf: UnsafeRawBufferPointer(start: base, count: nl))
            let tooLong = try pending.withUnsafeBytes { line throws -> Bool in
                let trimmed = Self.trimCR(line)
                if trimmed.count > maximumLineLength { return true }
                goOn = try body(.line(trimmed))
                return false
            }
            if tooLong { return try fail(body) }
            // Keep a modest buffer for the next partial line; drop a huge one.
            if pending.capacity > 64 * 1024 {
                pending = []
            } else {
                pending.removeAll(keepingCapacity: true)
            }
            start = nl + 1
        }

        while goOn, start < count, let nl = Self.newline(in: base, from: start, to: count) {
            let line = Self.trimCR(UnsafeRawBufferPointer(start: base + start, count: nl - start))
            if line.count > maximumLineLength { return try fail(body) }
            goOn = try body(.line(line))
            start = nl + 1
        }
        if !goOn, start < count, !isFailed {
            held.append(contentsOf: UnsafeRawBufferPointer(start: base + start, count: count - start))
            return
        }

        if start < count {
            if count - start > maximumLineLength + 1 { return try fail(body) }
            pending.append(contentsOf: UnsafeRawBufferPointer(start: base + start, count: count - start))
        }
    }

    /// Feeds bytes and returns the events (copies each line; for tests and cold paths).
    public mutating func feed(_ bytes: some Sequence<UInt8>) -> [Event] {
        var events: [Event] = []
        let array = Array(bytes)
        array.withUnsafeBytes { chunk in
            process(chunk) { frame in
                switch frame {
                case .line(let line): events.append(.line(Array(line)))
                case .lineTooLong: events.append(.lineTooLong)
                }
            }
        }
        return events
    }

    private mutating func fail(_ body: (Frame) throws -> Bool) rethrows {
        isFailed = true
        pending = []
        held = []
        _ = try body(.lineTooLong)
    }

    private static func newline(in base: UnsafeRawPointer, from: Int, to: Int) -> Int? {
        guard from < to, let hit = memchr(base + from, 0x0A, to - from) else { return nil }
        return UnsafeRawPointer(hit) - base
    }

    private static func trimCR(_ line: UnsafeRawBufferPointer) -> UnsafeRawBufferPointer {
        if let last = line.last, last == 0x0D {
            return UnsafeRawBufferPointer(rebasing: line[..<(line.count - 1)])
        }
        return line
    }
}
