import AgentCore
import AgentPosix
import FoundationEssentials
import Glibc

/// A call to the emulator's admin API that failed: the method, the path, the server and what
/// went wrong; `status` and `body` when an answer came that was not the one asked for.
public struct EmulatorCallError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Failure: Sendable, Equatable {
        /// The host is not an IPv4 address.
        case notIPv4
        /// No connection (`connect`, or the socket before it).
        case connect(PosixError)
        case send(PosixError)
        /// No answer within the timeout (seconds).
        case noAnswer(timeout: Double)
        /// The connection ended before an answer.
        case closed
        case notHTTP
        /// The connection ended in the body: `received` of `expected` bytes.
        case truncated(status: Int, received: Int, expected: Int)
        /// An answer, but not a 2xx with a JSON body; the body's first 300 bytes as text.
        case answered(status: Int, body: String)
    }

    public var method: String
    public var path: String
    /// `HOST:PORT`.
    public var server: String
    public var failure: Failure

    public init(method: String, path: String, server: String, _ failure: Failure) {
        self.method = method
        self.path = path
        self.server = server
        self.failure = failure
    }

    /// The HTTP status of the answer, when one came.
    public var status: Int? {
        switch failure {
        case .truncated(let status, _, _), .answered(let status, _): status
        default: nil
        }
    }

    public var description: String {
        let why = switch failure {
        case .notIPv4: "not an IPv4 address: \(server)"
        case .connect(let e): "\(e.call) \(server): \(e.message)"
        case .send(let e): "\(e)"
        case .noAnswer(let timeout): "no answer within \(timeout) s"
        case .closed: "the connection ended before an answer"
        case .notHTTP: "not an HTTP/1.x answer"
        case .truncated(let status, let received, let expected):
            "HTTP \(status) with \(received) of \(expected) body bytes: the connection ended"
        case .answered(let status, let body): "HTTP \(status) \(body)"
        }
        return "\(method) \(path): \(why)"
    }
}

/// An admin token file (`--admin-token FILE`) that cannot be used: the path and why.
public struct AdminTokenFileError: Error, Sendable, Equatable, CustomStringConvertible {
    public var path: String
    /// `cannot read the file`, `the file is empty`, `the token contains white space`.
    public var why: String

    public init(path: String, why: String) {
        self.path = path
        self.why = why
    }

    public var description: String { "\(path): \(why)" }
}

/// A minimal blocking HTTP/1.1 client for the emulator's admin API on loopback:
/// one connection per call (`Connection: close`), JSON in and out. The soak runner, the
/// fault tool, the benchmarks, the tests' emulator fixture and `pushwoosh-agentctl fleet
/// advance-clock` use it.
public struct LoopbackHTTP: Sendable {
    public let host: String
    public let port: UInt16
    public var timeout: Double
    /// Sent as `Authorization: Bearer TOKEN` (an emulator started with `--admin-token`).
    public var bearerToken: String?

    public init(host: String = "127.0.0.1", port: UInt16, timeout: Double = 10, bearerToken: String? = nil) {
        self.host = host
        self.port = port
        self.timeout = timeout
        self.bearerToken = bearerToken
    }

    /// The token of an admin token file as the emulator reads it (`--admin-token FILE`): the
    /// file's text without trailing white space, not empty, with no white space inside.
    public static func bearerToken(file path: String) throws(AdminTokenFileError) -> String {
        guard let data = try? readWholeFile(path) else { throw AdminTokenFileError(path: path, why: "cannot read the file") }
        var text = String(decoding: data, as: UTF8.self)
        while let last = text.last, last.isWhitespace { text.removeLast() }
        guard !text.isEmpty else { throw AdminTokenFileError(path: path, why: "the file is empty") }
        guard !text.contains(where: { $0.isWhitespace || $0.isNewline }) else { throw AdminTokenFileError(path: path, why: "the token contains white space") }
        return text
    }

    public struct Response: Sendable {
        public var status: Int
        public var body: [UInt8]
        public var json: JSONValue? { try? JSONReader.parse(body) }
    }

    /// The server of an `http://HOST:PORT/PATH` URL (an IPv4 host) and the path with its query.
    public static func parse(url: String, timeout: Double = 10) -> (server: LoopbackHTTP, path: String)? {
        guard let parsed = URL(string: url), parsed.scheme == "http", let host = parsed.host,
              let port = parsed.port.flatMap(UInt16.init(exactly:)) else { return nil }
        var path = parsed.path.isEmpty ? "/" : parsed.path
        if let query = parsed.query { path += "?" + query }
        return (LoopbackHTTP(host: host, port: port, timeout: timeout), path)
    }

    /// Sends `method path` with an optional JSON body; returns status and body.
    public func call(_ method: String, _ path: String, json: JSONValue? = nil) throws(EmulatorCallError) -> Response {
        try call(method, path, body: json.map(JSONWriter.encode))
    }

    /// Sends `method path` with `body` (as `application/json`; nil: none); returns status and body.
    public func call(_ method: String, _ path: String, body: [UInt8]?) throws(EmulatorCallError) -> Response {
        func failed(_ failure: EmulatorCallError.Failure) -> EmulatorCallError {
            EmulatorCallError(method: method, path: path, server: "\(host):\(port)", failure)
        }
        let fd: Int32
        do {
            fd = try BlockingSocket.connectTCP(host: host, port: port, timeout: timeout)
        } catch {
            throw failed(error.call == "inet_pton" ? .notIPv4 : .connect(error))
        }
        defer { close(fd) }
        var head = "\(method) \(path) HTTP/1.1\r\nHost: \(host):\(port)\r\nConnection: close\r\n"
        if let bearerToken { head += "Authorization: Bearer \(bearerToken)\r\n" }
        if body != nil { head += "Content-Type: application/json\r\n" }
        head += "Content-Length: \(body?.count ?? 0)\r\n\r\n"
        do throws(PosixError) {
            try BlockingSocket.sendAll(fd, Array(head.utf8) + (body ?? []))
        } catch {
            throw failed(.send(error))
        }
        let reader = HTTPResponseReader(fd: fd)
        guard let answer = reader.next(request: method) else {
            throw failed(reader.endErrno == EAGAIN ? .noAnswer(timeout: timeout) : .closed)
        }
        guard answer.head.status != 0 else { throw failed(.notHTTP) }
        guard answer.complete else {
            throw failed(.truncated(status: answer.status, received: answer.body.count, expected: answer.head.contentLength ?? 0))
        }
        return Response(status: answer.status, body: answer.body)
    }

    /// Like `call`, but requires a 2xx answer with a JSON body.
    public func json(_ method: String, _ path: String, json: JSONValue? = nil) throws(EmulatorCallError) -> JSONValue {
        let r = try call(method, path, json: json)
        guard (200..<300).contains(r.status), let value = r.json else {
            throw EmulatorCallError(method: method, path: path, server: "\(host):\(port)",
                                    .answered(status: r.status, body: String(decoding: r.body.prefix(300), as: UTF8.self)))
        }
        return value
    }
}
