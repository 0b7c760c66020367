import AgentCore
import AgentPosix
import CCurl
import FoundationEssentials
import Glibc

/// The real network: libcurl's multi interface driven by the agent's own event loop
/// (the pattern of curl's `docs/examples/ephiperfifo.c`). libcurl tells the loop which
/// sockets to watch (`CURLMOPT_SOCKETFUNCTION`) and when to call back
/// (`CURLMOPT_TIMERFUNCTION`); readiness and the timer call `curl_multi_socket_action`.
/// No thread of its own: every callback, and every completion, runs on the loop thread.
///
/// What each request gets: TLS always verified, with the system's CA store plus
/// `NetworkOptions.caCertificates`, the proxy of `NetworkOptions` or the environment, connection
/// reuse across requests (the multi handle's connection cache), `RequestTimeout=` as a hard
/// bound on the whole request (`CURLOPT_TIMEOUT_MS`), every encoding libcurl was built
/// with (gzip among them), `http`/`https` only, no redirects, and a response body of at most
/// `maximumBodyBytes`.
///
/// A request is sent once. libcurl would send it again, at once, when a reused keep-alive
/// connection closes before any byte of the answer; the body is therefore fed through
/// `CURLOPT_READFUNCTION` and the rewind such a resend needs is refused, so the agent sees the
/// failure (as the SDK would) and its own retry rules, `X-Retry-Count` included, decide.
///
/// Loop thread only, like the loop's own registrations.
public final class CurlTransport: HTTPTransport {
    /// A response body larger than this is abandoned ("no response"): 16 MiB is far above
    /// any flags answer and far below what would hurt the host.
    public static let defaultMaximumBodyBytes = 16 << 20

    private let loop: EventLoop
    private let multi: UnsafeMutableRawPointer
    private let userAgent: String?
    private let maximumBodyBytes: Int
    private var transfers: [UnsafeMutableRawPointer: Transfer] = [:]
    /// The descriptors libcurl asked the loop to watch, so none is left registered (with a
    /// handler that points here) once this transport is gone.
    private var watched: Set<Int32> = []
    private var timer: EventLoop.TimerHandle?
    /// CAs and proxy for the requests sent from now on (a reload changes them).
    public var network: NetworkOptions

    /// `curl_global_init` once per process, before the first handle (it is not
    /// thread-safe in libcurl 7.88; Swift runs a global's initialiser exactly once).
    private static let globalInit: Int32 = Int32(Curl.globalInit(Int(CURL_GLOBAL_DEFAULT)).rawValue)

    /// `curl_global_init` for other users of libcurl in this process (`CurlProbe`).
    static let initialiseLibrary: Void = { precondition(globalInit == 0, "curl_global_init failed (\(globalInit))") }()

    public init(loop: EventLoop, userAgent: String? = nil, network: NetworkOptions = NetworkOptions(),
                maximumBodyBytes: Int = CurlTransport.defaultMaximumBodyBytes) {
        precondition(Self.globalInit == 0, "curl_global_init failed (\(Self.globalInit))")
        guard let multi = Curl.multiInit() else { fatalError("curl_multi_init failed: out of memory") }
        self.loop = loop
        self.multi = multi
        self.userAgent = userAgent
        self.maximumBodyBytes = maximumBodyBytes
        self.network = network
        let me = Unmanaged.passUnretained(self).toOpaque()
        _ = pw_curl_multi_setopt_pointer(Curl.multiSetopt, multi, CURLMOPT_SOCKETDATA, me)
        _ = pw_curl_multi_setopt_pointer(Curl.multiSetopt, multi, CURLMOPT_TIMERDATA, me)
        _ = pw_curl_multi_setopt_socket_callback(Curl.multiSetopt, multi) { _, fd, what, user, _ in
            Unmanaged<CurlTransport>.fromOpaque(user!).takeUnretainedValue().watch(fd, what: what)
            return 0
        }
        _ = pw_curl_multi_setopt_timer_callback(Curl.multiSetopt, multi) { _, milliseconds, user in
            Unmanaged<CurlTransport>.fromOpaque(user!).takeUnretainedValue().arm(milliseconds: milliseconds)
            return 0
        }
    }

    deinit {
        // Shutting down: requests in flight are abandoned without their completions. libcurl
        // is told to call back no more first (it would reach an object being destroyed); the
        // sockets it closes are then taken off the loop here.
        _ = pw_curl_multi_setopt_socket_callback(Curl.multiSetopt, multi, nil)
        _ = pw_curl_multi_setopt_timer_callback(Curl.multiSetopt, multi, nil)
        for (_, transfer) in transfers {
            _ = Curl.multiRemoveHandle(multi, transfer.easy)
            transfer.release()
        }
        if let timer { loop.cancel(timer) }
        _ = Curl.multiCleanup(multi)
        for fd in watched { loop.unregister(fd) }
    }

    /// Requests in flight (tests: nothing is left behind).
    public var inFlight: Int { transfers.count }

    // MARK: Sending

    public func send(_ request: HTTPRequest, completion: @escaping (HTTPOutcome) -> Void) {
        loop.assertOnLoopThread()
        guard let easy = Curl.easyInit() else {
            finishSoon(completion, .noResponse(reason: "curl_easy_init failed: out of memory"))
            return
        }
        let transfer = Transfer(easy: easy, body: Array(request.body), completion: completion,
                                maximumBodyBytes: maximumBodyBytes)
        let key = Unmanaged.passUnretained(transfer).toOpaque()
        var failed: CURLcode = CURLE_OK
        func set(_ code: CURLcode) { if failed == CURLE_OK { failed = code } }

        set(pw_curl_easy_setopt_string(Curl.easySetopt, easy, CURLOPT_URL, request.url))
        set(pw_curl_easy_setopt_string(Curl.easySetopt, easy, CURLOPT_PROTOCOLS_STR, "http,https"))
        set(pw_curl_easy_setopt_long(Curl.easySetopt, easy, CURLOPT_NOSIGNAL, 1))
        set(network.apply(to: easy))
        set(pw_curl_easy_setopt_long(Curl.easySetopt, easy, CURLOPT_TIMEOUT_MS, Self.milliseconds(request.timeout)))
        set(pw_curl_easy_setopt_string(Curl.easySetopt, easy, CURLOPT_ACCEPT_ENCODING, ""))  // all built in: gzip, deflate, br
        if let userAgent { set(pw_curl_easy_setopt_string(Curl.easySetopt, easy, CURLOPT_USERAGENT, userAgent)) }
        set(pw_curl_easy_setopt_long(Curl.easySetopt, easy, CURLOPT_POST, 1))
        set(pw_curl_easy_setopt_offset(Curl.easySetopt, easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(request.body.count)))
        set(pw_curl_easy_setopt_pointer(Curl.easySetopt, easy, CURLOPT_READDATA, key))
        set(pw_curl_easy_setopt_data_callback(Curl.easySetopt, easy, CURLOPT_READFUNCTION) { data, size, count, user in
            Unmanaged<Transfer>.fromOpaque(user!).takeUnretainedValue().sendBody(into: data, size * count)
        })
        set(pw_curl_easy_setopt_pointer(Curl.easySetopt, easy, CURLOPT_SEEKDATA, key))
        set(pw_curl_easy_setopt_seek_callback(Curl.easySetopt, easy) { user, _, _ in
            Unmanaged<Transfer>.fromOpaque(user!).takeUnretainedValue().refuseResend()
        })
        for header in request.headers { transfer.appendHeader("\(header.name): \(header.value)") }
        transfer.appendHeader("Expect:")  // no 100-continue round trip for larger bodies
        set(pw_curl_easy_setopt_pointer(Curl.easySetopt, easy, CURLOPT_HTTPHEADER, UnsafeMutableRawPointer(transfer.headerList)))
        set(pw_curl_easy_setopt_pointer(Curl.easySetopt, easy, CURLOPT_ERRORBUFFER, transfer.errorBuffer))
        set(pw_curl_easy_setopt_pointer(Curl.easySetopt, easy, CURLOPT_PRIVATE, key))
        set(pw_curl_easy_setopt_pointer(Curl.easySetopt, easy, CURLOPT_WRITEDATA, key))
        set(pw_curl_easy_setopt_data_callback(Curl.easySetopt, easy, CURLOPT_WRITEFUNCTION) { data, size, count, user in
            Unmanaged<Transfer>.fromOpaque(user!).takeUnretainedValue().receiveBody(data, size * count)
        })
        set(pw_curl_easy_setopt_pointer(Curl.easySetopt, easy, CURLOPT_HEADERDATA, key))
        set(pw_curl_easy_setopt_data_callback(Curl.easySetopt, easy, CURLOPT_HEADERFUNCTION) { data, size, count, user in
            Unmanaged<Transfer>.fromOpaque(user!).takeUnretainedValue().receiveHeader(data, size * count)
        })
        if failed != CURLE_OK {
            let reason = "request not sent: \(Self.describe(failed, detail: transfer.errorDetail))"
            transfer.release()
            finishSoon(completion, .noResponse(reason: reason))
            return
        }
        transfers[key] = transfer
        let added = Curl.multiAddHandle(multi, easy)
        if added != CURLM_OK {
            transfers[key] = nil
            transfer.release()
            finishSoon(completion, .noResponse(reason: "request not sent: \(String(cString: Curl.multiStrerror(added)))"))
        }
        // The first step happens from the timer libcurl has just asked for: `completion`
        // never runs inside `send`.
    }

    /// Completes on the next pass of the loop (the HTTPTransport contract: never inside `send`).
    private func finishSoon(_ completion: @escaping (HTTPOutcome) -> Void, _ outcome: HTTPOutcome) {
        loop.schedule(at: loop.now) { completion(outcome) }
    }

    /// `CURLOPT_TIMEOUT_MS` for `seconds`: every time span the configuration accepts, however
    /// long, fits (shared with `CurlProbe`).
    static func milliseconds(_ seconds: Seconds) -> Int {
        guard seconds.isFinite, seconds > 0 else { return 0 }  // 0: libcurl's "no timeout"
        return seconds >= 1e9 ? 1_000_000_000_000 : max(1, Int((seconds * 1000).rounded(.up)))
    }

    // MARK: libcurl's callbacks

    /// CURLMOPT_SOCKETFUNCTION: watch `fd` for what libcurl waits for, or stop.
    private func watch(_ fd: Int32, what: Int32) {
        if what == CURL_POLL_REMOVE {
            loop.unregister(fd)
            watched.remove(fd)
            return
        }
        var interest: EventLoop.Interest = []
        if what & CURL_POLL_IN != 0 { interest.insert(.read) }
        if what & CURL_POLL_OUT != 0 { interest.insert(.write) }
        do {
            if loop.isRegistered(fd) {
                try loop.modify(fd, interest: interest)
            } else {
                try loop.register(fd, interest: interest) { [unowned self] events in self.ready(fd, events) }
                watched.insert(fd)
            }
        } catch {
            // epoll refused the descriptor (out of memory): tell libcurl it failed; the
            // request ends with an error instead of waiting forever.
            var running: Int32 = 0
            _ = Curl.multiSocketAction(multi, fd, CURL_CSELECT_ERR, &running)
            collectFinished()
        }
    }

    /// CURLMOPT_TIMERFUNCTION: one timer, re-armed at what libcurl asks (-1: none).
    private func arm(milliseconds: Int) {
        if let timer { loop.cancel(timer) }
        timer = nil
        guard milliseconds >= 0 else { return }
        timer = loop.schedule(at: loop.now + Double(milliseconds) / 1000) { [unowned self] in
            self.timer = nil
            var running: Int32 = 0
            _ = Curl.multiSocketAction(multi, CURL_SOCKET_TIMEOUT, 0, &running)
            collectFinished()
        }
    }

    private func ready(_ fd: Int32, _ events: EventLoop.Events) {
        var flags: Int32 = 0
        if events.contains(.readable) { flags |= CURL_CSELECT_IN }
        if events.contains(.writable) { flags |= CURL_CSELECT_OUT }
        if events.contains(.error) || events.contains(.hangup) { flags |= CURL_CSELECT_ERR }
        var running: Int32 = 0
        _ = Curl.multiSocketAction(multi, fd, flags, &running)
        collectFinished()
    }

    /// Hands every finished transfer's outcome to its completion, after libcurl has let go
    /// of it (a completion may send the next request at once).
    private func collectFinished() {
        var left: Int32 = 0
        while let message = Curl.multiInfoRead(multi, &left) {
            guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
            let result = message.pointee.data.result
            var privateData: UnsafeMutableRawPointer?
            _ = withUnsafeMutablePointer(to: &privateData) {
                pw_curl_easy_getinfo_pointer(Curl.easyGetinfo, easy, CURLINFO_PRIVATE, UnsafeMutableRawPointer($0))
            }
            _ = Curl.multiRemoveHandle(multi, easy)
            guard let key = privateData, let transfer = transfers.removeValue(forKey: key) else {
                Curl.easyCleanup(easy)
                continue
            }
            let outcome = outcome(of: transfer, result: result)
            transfer.release()
            transfer.completion(outcome)
        }
    }

    private func outcome(of transfer: Transfer, result: CURLcode) -> HTTPOutcome {
        if transfer.bodyTooLarge {
            return .noResponse(reason: "response body over \(maximumBodyBytes) bytes")
        }
        if transfer.resendRefused {
            return .noResponse(reason: "the server closed the connection without an answer (not sent twice)")
        }
        guard result == CURLE_OK else {
            return .noResponse(reason: NetworkProblem.describe(result, easy: transfer.easy, detail: transfer.errorDetail))
        }
        var status = 0
        _ = pw_curl_easy_getinfo_long(Curl.easyGetinfo, transfer.easy, CURLINFO_RESPONSE_CODE, &status)
        guard status > 0 else { return .noResponse(reason: "no HTTP status line") }
        return .response(status: status, headers: transfer.responseHeaders, body: Data(transfer.body))
    }

    /// libcurl's own account of this failure when it gave one (it names the host, port and
    /// time), else the code's summary: "Operation timed out after 1000 milliseconds with 0
    /// bytes received (curl 28)".
    static func describe(_ code: CURLcode, detail: String) -> String {
        let text = detail.isEmpty ? String(cString: Curl.easyStrerror(code)) : detail.trimmingWhitespace()
        return "\(text) (curl \(code.rawValue))"
    }
}

/// One request in flight: its easy handle, header list, error buffer and what has come
/// back so far. Owned by `CurlTransport.transfers`; libcurl's callbacks reach it through
/// an unretained pointer.
private final class Transfer {
    let easy: UnsafeMutableRawPointer
    let completion: (HTTPOutcome) -> Void
    let maximumBodyBytes: Int
    let requestBody: [UInt8]
    private var bodySent = 0
    /// libcurl asked to rewind the body to send it again on a fresh connection: refused.
    private(set) var resendRefused = false
    private(set) var headerList: UnsafeMutablePointer<curl_slist>?
    let errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE))
    var body: [UInt8] = []
    var responseHeaders: [String: String] = [:]
    var bodyTooLarge = false

    init(easy: UnsafeMutableRawPointer, body: [UInt8], completion: @escaping (HTTPOutcome) -> Void, maximumBodyBytes: Int) {
        self.easy = easy
        requestBody = body
        self.completion = completion
        self.maximumBodyBytes = maximumBodyBytes
        errorBuffer.initialize(to: 0)
    }

    func appendHeader(_ line: String) {
        headerList = Curl.slistAppend(headerList, line)
    }

    var errorDetail: String { String(cString: errorBuffer) }

    /// Frees what libcurl was given. Called once the handle is out of the multi handle.
    func release() {
        Curl.easyCleanup(easy)
        Curl.slistFreeAll(headerList)
        headerList = nil
        errorBuffer.deallocate()
    }

    /// CURLOPT_READFUNCTION: the next part of the request body.
    func sendBody(into buffer: UnsafeMutablePointer<CChar>?, _ capacity: Int) -> Int {
        guard let buffer else { return 0 }
        let n = min(capacity, requestBody.count - bodySent)
        guard n > 0 else { return 0 }
        requestBody.withUnsafeBytes { raw in
            UnsafeMutableRawPointer(buffer).copyMemory(from: raw.baseAddress! + bodySent, byteCount: n)
        }
        bodySent += n
        return n
    }

    /// CURLOPT_SEEKFUNCTION: only ever asked for to send the request a second time.
    func refuseResend() -> Int32 {
        resendRefused = true
        return Int32(CURL_SEEKFUNC_FAIL)
    }

    /// CURLOPT_WRITEFUNCTION: returning less than `count` makes libcurl abort the transfer.
    func receiveBody(_ data: UnsafeMutablePointer<CChar>?, _ count: Int) -> Int {
        guard let data, count > 0 else { return count }
        if body.count + count > maximumBodyBytes {
            bodyTooLarge = true
            return 0
        }
        body.append(contentsOf: UnsafeRawBufferPointer(start: data, count: count))
        return count
    }

    /// CURLOPT_HEADERFUNCTION: one header line at a time; a new status line (after a
    /// `100 Continue`) starts the headers afresh. Names are kept lowercase.
    func receiveHeader(_ data: UnsafeMutablePointer<CChar>?, _ count: Int) -> Int {
        guard let data, count > 0 else { return count }
        let line = String(decoding: UnsafeRawBufferPointer(start: data, count: count), as: UTF8.self)
        if line.hasPrefix("HTTP/") {
            responseHeaders = [:]
            return count
        }
        guard let colon = line.firstIndex(of: ":") else { return count }
        let name = line[..<colon].lowercased()
        let value = line[line.index(after: colon)...].trimmingWhitespace()
        responseHeaders[name] = value
        return count
    }
}
