import AgentCore
import AgentPosix
import AgentWire
import Glibc
import LabClock

/// A blocking, line-oriented client of a Unix stream socket, for tests, benchmarks and
/// tools: connect, write, read `\n`-terminated lines, each read bounded by `timeout`
/// seconds; and JSON-RPC calls on top. Reads return nil at end of stream, on an error or
/// after the timeout, so a test can assert on "no answer".
public final class LineClient {
    public struct Failure: Error, Sendable, CustomStringConvertible {
        public var description: String
        public init(_ description: String) { self.description = description }
    }

    public let fd: Int32
    private var pending: [UInt8] = []
    private var nextID = 1

    public init(path: String, timeout: Double = 10) throws(Failure) {
        do {
            fd = try UnixSocket.connect(to: path).take()
        } catch {
            throw Failure("connect \(path): \(error)")
        }
        BlockingSocket.setReceiveTimeout(fd, timeout)
    }

    /// A client on a connected stream socket it now owns (e.g. one end of a `socketpair`).
    public init(descriptor: Int32, timeout: Double = 10) {
        fd = descriptor
        BlockingSocket.setReceiveTimeout(fd, timeout)
    }

    deinit { close(fd) }

    /// Writes `bytes`; false when the other end is gone (the next read says so too).
    @discardableResult
    public func send(_ bytes: [UInt8]) -> Bool { (try? BlockingSocket.sendAll(fd, bytes)) != nil }

    @discardableResult
    public func send(_ text: String) -> Bool { send(Array(text.utf8)) }

    /// The next line's bytes (without the `\n`); nil at end of stream, on an error or after the timeout.
    public func readLineBytes() -> [UInt8]? {
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            if let nl = pending.firstIndex(of: 0x0A) {
                let line = Array(pending[..<nl])
                pending.removeFirst(nl + 1)
                return line
            }
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0, errno == EINTR { continue }
            if n <= 0 { return nil }
            pending.append(contentsOf: chunk[..<n])
        }
    }

    /// The next line as text; nil at end of stream, on an error or after the timeout.
    public func readLine() -> String? { readLineBytes().map { String(decoding: $0, as: UTF8.self) } }

    /// Whether the other end closed the connection (end of stream within the timeout).
    public func readsEOF() -> Bool {
        var byte: UInt8 = 0
        return recv(fd, &byte, 1, 0) == 0
    }

    /// Sends one request (`params` as JSON text) and returns the whole answer, `.null`
    /// when none came.
    public func call(_ method: String, _ params: String = "{}", id: Int = 1) -> JSONValue {
        send(#"{"jsonrpc":"2.0","id":\#(id),"method":"\#(method)","params":\#(params)}"# + "\n")
        return readLineBytes().flatMap { try? JSONReader.parse($0) } ?? .null
    }

    /// Sends a request and returns its `result` (throws when there is none).
    public func call(_ method: SocketMethod, _ params: [String: JSONValue] = [:]) throws(Failure) -> JSONValue {
        let id = nextID
        nextID += 1
        guard send(RPCEncoder.request(id: .number(Double(id)), method: method, params: params)) else {
            throw Failure("\(method): the other end is gone")
        }
        guard let line = readLineBytes() else { throw Failure("\(method): no answer") }
        guard let answer = try? JSONReader.parse(line), let result = answer["result"] else {
            throw Failure("\(method) failed: \(String(decoding: line, as: UTF8.self))")
        }
        return result
    }

    public static func call(_ path: String, _ method: SocketMethod, _ params: [String: JSONValue] = [:]) throws(Failure) -> JSONValue {
        try LineClient(path: path).call(method, params)
    }
}
