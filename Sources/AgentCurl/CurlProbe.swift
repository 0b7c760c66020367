import AgentCore
import CCurl
import FoundationEssentials

/// One request sent and waited for, with what a person checking the connection wants to
/// see: timings of each phase, the address reached, the server's certificate chain
/// (`CURLINFO_CERTINFO`) and the outcome. Blocking (`curl_easy_perform`): for
/// `pushwoosh-agentd --doctor`, never on the agent's loop. The same `NetworkOptions`
/// (CAs, proxy) as the agent's transport.
public enum CurlProbe {
    /// One certificate of the chain the server sent, leaf first.
    public struct Certificate: Sendable, Equatable {
        public var subject: String
        public var issuer: String
        public var notBefore: String
        public var notAfter: String
    }

    public struct Result: Sendable {
        public var outcome: HTTPOutcome
        /// What went wrong when there is no response (`NetworkProblem`), else nil.
        public var problem: NetworkProblem?
        /// Seconds from the start to: the name resolved, TCP connected, TLS done, all done.
        public var resolved: Double
        public var connected: Double
        public var tlsDone: Double
        public var total: Double
        /// The address and port the connection went to (the proxy's when there is one).
        public var address: String
        public var port: Int
        public var certificates: [Certificate]
    }

    /// The header lines of an answer, all together, kept at most (a server that sends endless
    /// header lines is cut off there).
    public static let maximumHeaderBytes = 1 << 20

    /// - Parameter maximumBodyBytes: an answer body past this is abandoned as no response
    ///   ("response body over N bytes"): memory never follows a hostile server. The agent's limit
    ///   by default.
    public static func exchange(_ request: HTTPRequest, network: NetworkOptions, userAgent: String? = nil,
                                maximumBodyBytes: Int = CurlTransport.defaultMaximumBodyBytes) -> Result {
        _ = CurlTransport.initialiseLibrary
        guard let easy = Curl.easyInit() else {
            return Result(outcome: .noResponse(reason: "curl_easy_init failed: out of memory"), problem: .other,
                          resolved: 0, connected: 0, tlsDone: 0, total: 0, address: "", port: 0, certificates: [])
        }
        defer { Curl.easyCleanup(easy) }
        let sink = Sink(maximumBodyBytes: maximumBodyBytes)
        let box = Unmanaged.passUnretained(sink).toOpaque()
        let errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE))
        errorBuffer.initialize(to: 0)
        defer { errorBuffer.deallocate() }
        var headers: UnsafeMutablePointer<curl_slist>?
        for header in request.headers { headers = Curl.slistAppend(headers, "\(header.name): \(header.value)") }
        headers = Curl.slistAppend(headers, "Expect:")
        defer { Curl.slistFreeAll(headers) }
        var body = Array(request.body)
        body.append(0)
        _ = pw_curl_easy_setopt_string(Curl.easySetopt, easy, CURLOPT_URL, request.url)
        _ = pw_curl_easy_setopt_string(Curl.easySetopt, easy, CURLOPT_PROTOCOLS_STR, "http,https")
        _ = pw_curl_easy_setopt_long(Curl.easySetopt, easy, CURLOPT_NOSIGNAL, 1)
        _ = pw_curl_easy_setopt_long(Curl.easySetopt, easy, CURLOPT_CERTINFO, 1)
        _ = pw_curl_easy_setopt_long(Curl.easySetopt, easy, CURLOPT_TIMEOUT_MS, CurlTransport.milliseconds(request.timeout))
        _ = pw_curl_easy_setopt_string(Curl.easySetopt, easy, CURLOPT_ACCEPT_ENCODING, "")
        if let userAgent { _ = pw_curl_easy_setopt_string(Curl.easySetopt, easy, CURLOPT_USERAGENT, userAgent) }
        _ = network.apply(to: easy)
        _ = pw_curl_easy_setopt_pointer(Curl.easySetopt, easy, CURLOPT_HTTPHEADER, UnsafeMutableRawPointer(headers))
        _ = pw_curl_easy_setopt_pointer(Curl.easySetopt, easy, CURLOPT_ERRORBUFFER, errorBuffer)
        _ = pw_curl_easy_setopt_offset(Curl.easySetopt, easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(request.body.count))
        let code: CURLcode = body.withUnsafeMutableBytes { raw in
            _ = pw_curl_easy_setopt_pointer(Curl.easySetopt, easy, CURLOPT_POSTFIELDS, raw.baseAddress)
            _ = pw_curl_easy_setopt_pointer(Curl.easySetopt, easy, CURLOPT_WRITEDATA, box)
            _ = pw_curl_easy_setopt_data_callback(Curl.easySetopt, easy, CURLOPT_WRITEFUNCTION) { data, size, count, user in
                let sink = Unmanaged<Sink>.fromOpaque(user!).takeUnretainedValue()
                return sink.receive(data.map { UnsafeRawBufferPointer(start: $0, count: size * count) }, size * count)
            }
            _ = pw_curl_easy_setopt_pointer(Curl.easySetopt, easy, CURLOPT_HEADERDATA, box)
            _ = pw_curl_easy_setopt_data_callback(Curl.easySetopt, easy, CURLOPT_HEADERFUNCTION) { data, size, count, user in
                let sink = Unmanaged<Sink>.fromOpaque(user!).takeUnretainedValue()
                sink.headerBytes += size * count
                guard sink.headerBytes <= CurlProbe.maximumHeaderBytes else { return 0 }  // aborts the transfer
                if let data { sink.header(String(decoding: UnsafeRawBufferPointer(start: data, count: size * count), as: UTF8.self)) }
                return size * count
            }
            return Curl.easyPerform(easy)
        }
        func seconds(_ info: CURLINFO) -> Double {
            var micro: curl_off_t = 0
            _ = pw_curl_easy_getinfo_offset(Curl.easyGetinfo, easy, info, &micro)
            return Double(micro) / 1e6
        }
        var address: UnsafePointer<CChar>?
        _ = withUnsafeMutablePointer(to: &address) { pw_curl_easy_getinfo_pointer(Curl.easyGetinfo, easy, CURLINFO_PRIMARY_IP, UnsafeMutableRawPointer($0)) }
        var port = 0
        _ = pw_curl_easy_getinfo_long(Curl.easyGetinfo, easy, CURLINFO_PRIMARY_PORT, &port)
        let outcome: HTTPOutcome
        var problem: NetworkProblem?
        let detail = String(cString: errorBuffer)
        if sink.bodyTooLarge || sink.headerBytes > maximumHeaderBytes {
            outcome = .noResponse(reason: sink.bodyTooLarge ? "response body over \(maximumBodyBytes) bytes"
                                                            : "response headers over \(maximumHeaderBytes) bytes")
            problem = .other
        } else if code == CURLE_OK {
            var status = 0
            _ = pw_curl_easy_getinfo_long(Curl.easyGetinfo, easy, CURLINFO_RESPONSE_CODE, &status)
            outcome = .response(status: status, headers: sink.headers, body: Data(sink.body))
        } else {
            outcome = .noResponse(reason: NetworkProblem.describe(code, easy: easy, detail: detail))
            problem = NetworkProblem.classify(code, easy: easy, detail: detail)
        }
        return Result(outcome: outcome, problem: problem, resolved: seconds(CURLINFO_NAMELOOKUP_TIME_T),
                      connected: seconds(CURLINFO_CONNECT_TIME_T), tlsDone: seconds(CURLINFO_APPCONNECT_TIME_T),
                      total: seconds(CURLINFO_TOTAL_TIME_T), address: address.map { String(cString: $0) } ?? "", port: port,
                      certificates: certificates(easy))
    }

    /// The chain libcurl recorded (OpenSSL: "Subject:…", "Issuer:…", "Start date:…", "Expire date:…" lines).
    private static func certificates(_ easy: UnsafeMutableRawPointer) -> [Certificate] {
        (0..<pw_curl_certinfo_count(Curl.easyGetinfo, easy)).map { index in
            var fields: [String: String] = [:]
            var item = pw_curl_certinfo_at(Curl.easyGetinfo, easy, Int32(index))
            while let node = item {
                if let data = node.pointee.data {
                    let line = String(cString: data)
                    if let colon = line.firstIndex(of: ":") {
                        fields[String(line[..<colon])] = String(line[line.index(after: colon)...])
                    }
                }
                item = node.pointee.next
            }
            return Certificate(subject: fields["Subject"] ?? "", issuer: fields["Issuer"] ?? "",
                               notBefore: fields["Start date"] ?? "", notAfter: fields["Expire date"] ?? "")
        }
    }

    private final class Sink {
        let maximumBodyBytes: Int
        var body: [UInt8] = []
        var bodyTooLarge = false
        var headers: [String: String] = [:]
        var headerBytes = 0

        init(maximumBodyBytes: Int) { self.maximumBodyBytes = maximumBodyBytes }

        /// A piece of the body; 0 (libcurl then aborts) once it would pass the limit.
        func receive(_ data: UnsafeRawBufferPointer?, _ count: Int) -> Int {
            guard let data, count > 0 else { return count }
            if body.count + count > maximumBodyBytes {
                bodyTooLarge = true
                return 0
            }
            body.append(contentsOf: data)
            return count
        }

        func header(_ line: String) {
            if line.hasPrefix("HTTP/") { headers = [:]; return }
            guard let colon = line.firstIndex(of: ":") else { return }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingWhitespace()
        }
    }
}
