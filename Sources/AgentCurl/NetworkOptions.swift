import CCurl

/// How the agent reaches the server beyond the URL (`[Agent] CAFile=`, `[Agent] Proxy=`),
/// applied to every libcurl handle the agent makes: the refresh transport's and the doctor's.
///
/// TLS is always verified: the peer's chain against the trust store and the name against the
/// host (libcurl's defaults, set here explicitly; nothing turns them off). `caCertificates`
/// adds CAs to the system's store: libcurl 7.88 with OpenSSL (Debian 12) reads
/// `CURLOPT_CAINFO_BLOB` *instead of* the default bundle file, but still looks certificates up
/// in the default hashed directory (`CURLOPT_CAPATH`, `/etc/ssl/certs`, which
/// `update-ca-certificates` keeps), so the system's CAs and the file's are both trusted.
/// The same CAs are trusted for an `https://` proxy.
///
/// `proxy` wins over `https_proxy`/`http_proxy`/`all_proxy` from the environment; without it
/// libcurl reads those itself. `no_proxy` from the environment applies either way.
public struct NetworkOptions: Sendable, Equatable {
    /// PEM certificates to trust besides the system's.
    public var caCertificates: [UInt8]?
    /// `scheme://host:port` of the proxy; nil: the environment's.
    public var proxy: String?

    public init(caCertificates: [UInt8]? = nil, proxy: String? = nil) {
        self.caCertificates = caCertificates
        self.proxy = proxy
    }

    /// Sets the options on `easy`; the first failure's code, else `CURLE_OK`.
    func apply(to easy: UnsafeMutableRawPointer) -> CURLcode {
        var failed: CURLcode = CURLE_OK
        func set(_ code: CURLcode) { if failed == CURLE_OK { failed = code } }
        set(pw_curl_easy_setopt_long(Curl.easySetopt, easy, CURLOPT_SSL_VERIFYPEER, 1))
        set(pw_curl_easy_setopt_long(Curl.easySetopt, easy, CURLOPT_SSL_VERIFYHOST, 2))
        set(pw_curl_easy_setopt_long(Curl.easySetopt, easy, CURLOPT_PROXY_SSL_VERIFYPEER, 1))
        set(pw_curl_easy_setopt_long(Curl.easySetopt, easy, CURLOPT_PROXY_SSL_VERIFYHOST, 2))
        if let pem = caCertificates, !pem.isEmpty {
            pem.withUnsafeBytes { raw in
                set(pw_curl_easy_setopt_blob(Curl.easySetopt, easy, CURLOPT_CAINFO_BLOB, raw.baseAddress, raw.count))
                set(pw_curl_easy_setopt_blob(Curl.easySetopt, easy, CURLOPT_PROXY_CAINFO_BLOB, raw.baseAddress, raw.count))
            }
        }
        if let proxy { set(pw_curl_easy_setopt_string(Curl.easySetopt, easy, CURLOPT_PROXY, proxy)) }
        return failed
    }
}

/// Why a request got no HTTP answer, in words a user can act on, and as a label for
/// `/metrics` (a fixed set: one series per kind of problem, not per message).
public enum NetworkProblem: String, Sendable, CaseIterable {
    case tlsUntrusted = "tls_untrusted"
    case tlsExpired = "tls_expired"
    case tlsNotYetValid = "tls_not_yet_valid"
    case tlsWrongHost = "tls_wrong_host"
    case tls
    case proxy
    case nameResolution = "name_resolution"
    case connection
    case timeout
    case other

    /// The words a message about this problem starts with.
    public var phrase: String {
        switch self {
        case .tlsUntrusted: "TLS: the server's certificate is not trusted (a private CA goes in [Agent] CAFile=)"
        case .tlsExpired: "TLS: the server's certificate has expired"
        case .tlsNotYetValid: "TLS: the server's certificate is not valid yet"
        case .tlsWrongHost: "TLS: the server's certificate is for another host"
        case .tls: "TLS: the secure connection failed"
        case .proxy: "proxy: the proxy did not connect"
        // libcurl's own words say these plainly ("Could not resolve host", "Failed to connect",
        // "Operation timed out"): no words of the agent's before them.
        case .nameResolution, .connection, .timeout, .other: ""
        }
    }

    /// The libcurl codes of the problems its own message names.
    static let plainCodes: [Int: NetworkProblem] = [6: .nameResolution, 7: .connection, 28: .timeout]

    /// The problem a message made by `describe` names (`other` for any other text).
    public static func of(message: String) -> NetworkProblem {
        if let named = allCases.first(where: { !$0.phrase.isEmpty && message.contains($0.phrase) }) { return named }
        if let open = message.lastIndex(of: "("), message.hasSuffix(")"),
           let code = Int(message[message.index(after: open)...].dropFirst("curl ".count).dropLast()) {
            return plainCodes[code] ?? .other
        }
        return .other
    }

    /// What went wrong with a finished transfer, from libcurl's code and its details.
    static func classify(_ code: CURLcode, easy: UnsafeMutableRawPointer, detail: String) -> NetworkProblem {
        switch code {
        case CURLE_PEER_FAILED_VERIFICATION:
            // libcurl checks the name itself, after a chain OpenSSL accepted.
            if detail.contains("subject name") || detail.contains("does not match target host") { return .tlsWrongHost }
            var verify = 0
            _ = pw_curl_easy_getinfo_long(Curl.easyGetinfo, easy, CURLINFO_SSL_VERIFYRESULT, &verify)
            switch verify {
            case 10: return .tlsExpired        // X509_V_ERR_CERT_HAS_EXPIRED
            case 9: return .tlsNotYetValid     // X509_V_ERR_CERT_NOT_YET_VALID
            case 62: return .tlsWrongHost      // X509_V_ERR_HOSTNAME_MISMATCH
            case 0: return .tls
            default: return .tlsUntrusted      // unknown issuer, self-signed, chain problems
            }
        case CURLE_SSL_CONNECT_ERROR, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER, CURLE_SSL_CACERT_BADFILE,
             CURLE_SSL_ISSUER_ERROR, CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_INVALIDCERTSTATUS:
            return .tls
        case CURLE_COULDNT_RESOLVE_PROXY: return .proxy
        case CURLE_COULDNT_RESOLVE_HOST: return .nameResolution
        case CURLE_OPERATION_TIMEDOUT: return .timeout
        case CURLE_COULDNT_CONNECT:
            // Not the server's port: the connection that failed was the proxy's.
            // libcurl 7.88 names it in its message ("Failed to connect to HOST port N after …").
            var port = 0
            if let at = detail.firstRange(of: " port ") {
                port = Int(detail[at.upperBound...].prefix { $0.isNumber }) ?? 0
            }
            return detail.lowercased().contains("proxy") || (port != 0 && port != urlPort(easy)) ? .proxy : .connection
        default:
            var connectCode = 0
            _ = pw_curl_easy_getinfo_long(Curl.easyGetinfo, easy, CURLINFO_HTTP_CONNECTCODE, &connectCode)
            if (connectCode != 0 && connectCode != 200) || detail.contains("CONNECT tunnel") || detail.lowercased().contains("proxy") {
                return .proxy
            }
            return .other
        }
    }

    /// The port the request's URL names (its scheme's default when it names none).
    private static func urlPort(_ easy: UnsafeMutableRawPointer) -> Int {
        var raw: UnsafePointer<CChar>?
        _ = withUnsafeMutablePointer(to: &raw) { pw_curl_easy_getinfo_pointer(Curl.easyGetinfo, easy, CURLINFO_EFFECTIVE_URL, UnsafeMutableRawPointer($0)) }
        guard let raw else { return 0 }
        let url = String(cString: raw)
        guard let scheme = url.firstRange(of: "://") else { return 0 }
        let authority = url[scheme.upperBound...].prefix { $0 != "/" && $0 != "?" }
        if let colon = authority.lastIndex(of: ":"), !authority.hasSuffix("]"), let port = Int(authority[authority.index(after: colon)...]) {
            return port
        }
        return url.lowercased().hasPrefix("https") ? 443 : 80
    }

    /// "TLS: the server's certificate has expired: SSL certificate problem: certificate has
    /// expired (curl 60)": the problem in the agent's words, then libcurl's account.
    static func describe(_ code: CURLcode, easy: UnsafeMutableRawPointer, detail: String) -> String {
        let text = CurlTransport.describe(code, detail: detail)
        let problem = classify(code, easy: easy, detail: detail)
        return problem.phrase.isEmpty ? text : "\(problem.phrase): \(text)"
    }
}
