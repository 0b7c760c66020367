import AgentCore
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The real network: URLSession over libcurl. Answers are handed to `deliver`, which
/// must run them on the thread that owns the agent (the daemon passes `EventLoop.post`).
///
/// On Linux, FoundationNetworking ignores `URLRequest.timeoutInterval` and applies the
/// session's `timeoutIntervalForRequest` (measured: a 1 s request timeout waited 3 s for a
/// slow answer). So the session is made for the timeout asked, and remade when it changes.
public final class URLSessionTransport: HTTPTransport {
    private var session: URLSession?
    private var sessionTimeout: Double = 0
    private let deliver: @Sendable (@escaping @Sendable () -> Void) -> Void

    public init(deliver: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void) {
        self.deliver = deliver
    }

    deinit { session?.finishTasksAndInvalidate() }

    private func session(timeout: Double) -> URLSession {
        if let session, sessionTimeout == timeout { return session }
        session?.finishTasksAndInvalidate()
        let configuration = URLSessionConfiguration.ephemeral
        configuration.httpCookieAcceptPolicy = .never
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.timeoutIntervalForRequest = timeout
        let fresh = URLSession(configuration: configuration)
        session = fresh
        sessionTimeout = timeout
        return fresh
    }

    public func send(_ request: HTTPRequest, completion: @escaping (HTTPOutcome) -> Void) {
        // The completion belongs to the agent's thread; it is only ever run through
        // `deliver`, which hops back there.
        let box = LoopBound(completion)
        let deliver = self.deliver
        guard let url = URL(string: request.url) else {
            deliver { box.value(.noResponse(reason: "invalid URL \(request.url)")) }
            return
        }
        var urlRequest = URLRequest(url: url, cachePolicy: .reloadIgnoringLocalCacheData, timeoutInterval: request.timeout)
        urlRequest.httpMethod = "POST"
        for header in request.headers { urlRequest.setValue(header.value, forHTTPHeaderField: header.name) }
        urlRequest.httpBody = request.body
        let task = session(timeout: request.timeout).dataTask(with: urlRequest) { data, response, error in
            let outcome: HTTPOutcome
            if let http = response as? HTTPURLResponse {
                var headers: [String: String] = [:]
                for (key, value) in http.allHeaderFields {
                    if let key = key as? String, let value = value as? String { headers[key.lowercased()] = value }
                }
                outcome = .response(status: http.statusCode, headers: headers, body: data ?? Data())
            } else {
                let reason = (error as? URLError).map { "\($0.localizedDescription) (URLError \($0.code.rawValue))" }
                    ?? error.map { "\($0)" } ?? "no response"
                outcome = .noResponse(reason: reason)
            }
            deliver { box.value(outcome) }
        }
        task.resume()
    }
}

/// A value that may only be used on the thread that owns it (the agent's loop), carried
/// across threads without being touched on the way. The same idea as NIO's `NIOLoopBound`.
public struct LoopBound<Value>: @unchecked Sendable {
    public let value: Value
    public init(_ value: Value) { self.value = value }
}
