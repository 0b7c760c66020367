import AgentCore
import AgentPosix
import AgentWire
import Glibc

/// The one blocking, line-oriented client of a Unix stream socket (agentctl, the soak
/// runner, the fault tool, the benchmarks and the tests): connect, write, read
/// `\n`-terminated lines of at most `maximumLineLength` bytes (`LineFramer`), each read
/// bounded by the timeout; and JSON-RPC calls on top.
///
/// Two ways to read: `next()` says why nothing came (end of stream, time out, too long, a
/// system error), for tools that report it; `readLineBytes()`/`readLine()` return nil for
/// all of those, so a test can assert on "no answer".
public final class LineClient {
    /// Why a read gave no line.
    public enum ReadError: Error, Sendable, Equatable {
        /// Nothing within the timeout (`SO_RCVTIMEO`).
        case timedOut
        /// A line over `maximumLineLength` bytes.
        case tooLong
        /// `recv` failed (e.g. `ECONNRESET`).
        case system(PosixError)
    }

    /// Why a JSON-RPC call got no answer.
    public enum CallError: Error, Sendable, Equatable, CustomStringConvertible {
        case write(PosixError)
        case read(ReadError)
        /// The other end closed the connection before answering.
        case closed
        /// A line that is not a JSON-RPC message.
        case malformed(String)

        public var description: String {
            switch self {
            case .write(let error): "lost the connection: \(error.message)"
            case .read(.timedOut): "no answer in time"
            case .read(.tooLong): "answer too long"
            case .read(.system(let error)): "lost the connection: \(error.message)"
            case .closed: "closed the connection before answering"
            case .malformed(let why): "unexpected answer: \(why)"
            }
        }
    }

    /// A line client's failure, for callers that only report it (tests, tools).
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public var description: String
        public init(_ description: String) { self.description = description }
    }

    public let fd: Int32
    private var framer: LineFramer
    private var queued: [[UInt8]] = []
    private var nextID = 1

    /// The answers' size limit agentctl and the tools accept (a `status` of a big fleet is large).
    public static let defaultMaximumLineLength = 64 << 20

    /// Connects to `path`; `timeout` bounds every read (nil: no limit).
    public init(connecting path: String, timeout: Double?, maximumLineLength: Int = defaultMaximumLineLength) throws(UnixSocketError) {
        fd = try UnixSocket.connect(to: path).take()
        framer = LineFramer(maximumLineLength: maximumLineLength)
        setTimeout(timeout)
    }

    /// Connects to `path`, each read bounded by `timeout` seconds.
    public convenience init(path: String, timeout: Double = 10) throws(Failure) {
        do {
            try self.init(connecting: path, timeout: timeout)
        } catch {
            throw Failure("connect \(path): \(error)")
        }
    }

    /// A client on a connected stream socket it now owns (e.g. one end of a `socketpair`).
    public init(descriptor: Int32, timeout: Double = 10, maximumLineLength: Int = defaultMaximumLineLength) {
        fd = descriptor
        framer = LineFramer(maximumLineLength: maximumLineLength)
        setTimeout(timeout)
    }

    deinit { close(fd) }

    /// Bounds each read (`SO_RCVTIMEO`); nil waits forever.
    public func setTimeout(_ seconds: Double?) { BlockingSocket.setReceiveTimeout(fd, seconds ?? 0) }

    /// Writes all of `bytes` (`MSG_NOSIGNAL`: a vanished peer is an error, not SIGPIPE).
    public func write(_ bytes: [UInt8]) throws(PosixError) { try BlockingSocket.sendAll(fd, bytes) }

    /// Writes `bytes`; false when the other end is gone (the next read says so too).
    @discardableResult
    public func send(_ bytes: [UInt8]) -> Bool { (try? write(bytes)) != nil }

    @discardableResult
    public func send(_ text: String) -> Bool { send(Array(text.utf8)) }

    /// The next line's bytes (without the `\n`), nil at end of stream.
    public func next() throws(ReadError) -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while queued.isEmpty {
            if framer.isFailed { throw .tooLong }
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0 {
                let code = errno
                if code == EINTR { continue }
                if code == EAGAIN || code == EWOULDBLOCK { throw .timedOut }
                throw .system(PosixError(errno: code, call: "recv"))
            }
            if n == 0 { return nil }
            buffer.withUnsafeBytes { raw in
                framer.process(UnsafeRawBufferPointer(rebasing: raw[..<n])) { frame in
                    if case .line(let line) = frame { queued.append(Array(line)) }  // .lineTooLong: isFailed
                }
            }
        }
        return queued.removeFirst()
    }

    /// The next line's bytes (without the `\n`); nil at end of stream, on an error or after the timeout.
    public func readLineBytes() -> [UInt8]? { (try? next()) ?? nil }

    /// The next line as text; nil at end of stream, on an error or after the timeout.
    public func readLine() -> String? { readLineBytes().map { String(decoding: $0, as: UTF8.self) } }

    /// Whether the other end closed the connection (end of stream within the timeout).
    public func readsEOF() -> Bool {
        guard queued.isEmpty else { return false }
        var byte: UInt8 = 0
        return recv(fd, &byte, 1, 0) == 0
    }

    /// Sends one request and waits for the answer with its id (or the id-less answer to a
    /// request the server could not read); notifications that arrive meanwhile go to
    /// `onNotification`.
    ///
    /// A write that fails is not the end: the server may have answered and closed before the
    /// request was written (a connection refused, `-32000 too many connections`), and that
    /// answer waits in the receive buffer. It is read first; only when none came is the failed
    /// write (`.write`, e.g. "Broken pipe") the reason.
    public func call(method: SocketMethod, params: [String: JSONValue],
                     onNotification: (String, JSONValue) -> Void = { _, _ in }) throws(CallError) -> RPCResponse {
        let id = RPCID.number(Double(nextID))
        nextID += 1
        var failedWrite: PosixError?
        do { try write(RPCEncoder.request(id: id, method: method, params: params)) } catch { failedWrite = error }
        while true {
            let line: [UInt8]?
            do { line = try next() } catch {
                throw failedWrite.map { .write($0) } ?? .read(error)
            }
            guard let line else { throw failedWrite.map { .write($0) } ?? .closed }
            let message: RPCServerMessage
            do { message = try RPCServerMessage.parse(line) } catch { throw .malformed("\(error)") }
            switch message {
            case .response(let response) where response.id == id || response.id == .null:
                return response
            case .notification(let method, let params):
                onNotification(method, params)
            case .response, .batch:
                continue
            }
        }
    }

    /// Sends one request (`params` as JSON text, the method as written: a test may send one
    /// the server does not know) and returns the whole answer, `.null` when none came.
    public func call(_ method: String, _ params: String = "{}", id: Int = 1) -> JSONValue {
        send(#"{"jsonrpc":"2.0","id":\#(id),"method":"\#(method)","params":\#(params)}"# + "\n")
        return readLineBytes().flatMap { try? JSONReader.parse($0) } ?? .null
    }

    /// One request, one answer (no pipelining: the answer is the next line), parsed; nil when
    /// none came.
    /// A failed write still reads: the server's answer may have come before it closed.
    public func request(_ call: SocketCall, id: Int = 1) -> JSONValue? {
        send(RPCEncoder.request(id: .number(Double(id)), call))
        guard let line = readLineBytes() else { return nil }
        return try? JSONReader.parse(line)
    }

    /// Sends a request and returns its `result` (throws when there is none).
    public func call(_ method: SocketMethod, _ params: [String: JSONValue] = [:]) throws(Failure) -> JSONValue {
        let id = nextID
        nextID += 1
        // A failed write still reads: the server's answer (a refusal) may have come before it closed.
        let written = send(RPCEncoder.request(id: .number(Double(id)), method: method, params: params))
        guard let line = readLineBytes() else { throw Failure(written ? "\(method): no answer" : "\(method): the other end is gone") }
        guard let answer = try? JSONReader.parse(line), let result = answer["result"] else {
            throw Failure("\(method) failed: \(String(decoding: line, as: UTF8.self))")
        }
        return result
    }

    public static func call(_ path: String, _ method: SocketMethod, _ params: [String: JSONValue] = [:]) throws(Failure) -> JSONValue {
        try LineClient(path: path).call(method, params)
    }
}
