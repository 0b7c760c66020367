import FoundationEssentials

/// One HTTP POST to the Pushwoosh server (docs/device-api.md A.1).
public struct HTTPRequest: Sendable, Equatable {
    public var url: String
    /// Header fields in the order they are sent.
    public var headers: [HTTPHeader]
    public var body: Data
    public var timeout: Seconds
    /// The device API call it is (A.2), so a transport need not read it back from the URL;
    /// nil for a request built by hand.
    public var method: PushwooshAPI.Method?

    public init(url: String, headers: [HTTPHeader], body: Data, timeout: Seconds, method: PushwooshAPI.Method? = nil) {
        self.url = url
        self.headers = headers
        self.body = body
        self.timeout = timeout
        self.method = method
    }

    public func header(_ name: String) -> String? { headers.value(named: name) }
}

/// One header field of a request, as sent or received (the agent's transports, its HTTP
/// interface and the emulator).
public struct HTTPHeader: Sendable, Equatable {
    public var name: String
    public var value: String
    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }

    /// Whether the field is called `name`, compared case-insensitively (RFC 9110 5.1; names are
    /// ASCII), without lowercasing either: the HTTP interface looks headers up on every request.
    public func isNamed(_ name: String) -> Bool {
        self.name.utf8.elementsEqual(name.utf8) { a, b in a == b || (a | 0x20 == b | 0x20 && (a | 0x20) >= 0x61 && (a | 0x20) <= 0x7A) }
    }
}

extension Array where Element == HTTPHeader {
    /// The value of the first field named `name`, compared case-insensitively.
    public func value(named name: String) -> String? {
        first { $0.isNamed(name) }?.value
    }
}

/// What came back: an HTTP response, or nothing at all (refused, timed out, dropped).
public enum HTTPOutcome: Sendable, Equatable {
    /// `headers` keys are lowercase.
    case response(status: Int, headers: [String: String], body: Data)
    case noResponse(reason: String)
}

/// Sends HTTP requests. The core's only door to the network.
///
/// Contract: `completion` runs exactly once, on the executor that owns the agent
/// (the daemon's event loop, or the test's virtual loop), and never synchronously
/// inside `send`.
public protocol HTTPTransport: AnyObject {
    func send(_ request: HTTPRequest, completion: @escaping (HTTPOutcome) -> Void)
}
