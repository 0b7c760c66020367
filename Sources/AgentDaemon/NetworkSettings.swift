import AgentConfigFile
import AgentCurl
import AgentPosix
import FoundationEssentials
import Glibc

/// `[Agent] CAFile=` and `[Agent] Proxy=`: how the agent reaches the server. TLS is always
/// verified; these add CAs to the system's trust store and choose a proxy over the
/// environment's (`NetworkOptions`).
public struct NetworkSettings: Sendable, Equatable {
    /// `CAFile=`: a PEM file read (and checked) when the configuration is loaded or reloaded.
    public var caFile: CAFile?
    /// `Proxy=`: wins over `https_proxy`/`http_proxy` from the environment.
    public var proxy: String?

    public init() {}

    /// What libcurl is given.
    public var options: NetworkOptions {
        NetworkOptions(caCertificates: caFile?.pem, proxy: proxy)
    }
}

/// A CA file as read: its path and its certificates.
public struct CAFile: Sendable, Equatable {
    public var path: String
    /// The file's bytes (PEM).
    public var pem: [UInt8]
    /// How many certificates it holds.
    public var certificates: Int

    /// The largest CA file read: far above any bundle (Debian's whole store is about 200 KB).
    static let maximumBytes = 4 << 20

    /// Reads and checks `path`: absolute, readable, and holding at least one PEM certificate
    /// whose body is base64 of a DER sequence; anything else is an error saying what was found.
    public static func load(_ path: String) throws(ValueError) -> CAFile {
        guard path.hasPrefix("/") else { throw ValueError("not an absolute path: \"\(path)\"") }
        let bytes = try readFile(path)
        let text = String(decoding: bytes, as: UTF8.self)
        let begin = "-----BEGIN CERTIFICATE-----", end = "-----END CERTIFICATE-----"
        var rest = Substring(text)
        var count = 0
        while let start = rest.firstRange(of: begin) {
            count += 1
            guard let stop = rest[start.upperBound...].firstRange(of: end) else {
                throw ValueError("\"\(path)\": certificate \(count) has no \(end) line")
            }
            let body = rest[start.upperBound..<stop.lowerBound].filter { !$0.isWhitespace }
            guard let der = Data(base64Encoded: String(body)), der.count > 16, der.first == 0x30 else {
                throw ValueError("\"\(path)\": certificate \(count) is not base64 of a DER certificate")
            }
            rest = rest[stop.upperBound...]
        }
        guard count > 0 else {
            throw ValueError("\"\(path)\" holds no PEM certificate (expected \(begin) blocks)")
        }
        return CAFile(path: path, pem: bytes, certificates: count)
    }

    /// The file, read with AgentPosix's `readWholeFile` once `stat` says it is a regular file
    /// of at most `maximumBytes`.
    private static func readFile(_ path: String) throws(ValueError) -> [UInt8] {
        var info = stat()
        guard stat(path, &info) == 0 else { throw ValueError("cannot read \"\(path)\": \(reason(errno))") }
        guard (info.st_mode & S_IFMT) == S_IFREG else { throw ValueError("\"\(path)\" is not a regular file") }
        let tooLarge = ValueError("\"\(path)\" is larger than \(maximumBytes) bytes")
        guard Int(info.st_size) <= maximumBytes else { throw tooLarge }
        let bytes: [UInt8]
        do { bytes = try readWholeFile(path) } catch { throw ValueError("cannot read \"\(path)\": \(reason(error.errno))") }
        guard bytes.count <= maximumBytes else { throw tooLarge }  // it grew after the stat
        return bytes
    }

    private static func reason(_ code: Int32) -> String {
        switch code {
        case ENOENT: "no such file"
        case EACCES: "permission denied"
        default: String(cString: strerror(code))
        }
    }
}

extension ConfigValue {
    /// A proxy URL: `http://`, `https://`, `socks4://`, `socks4a://`, `socks5://` or
    /// `socks5h://` with a host and an optional port.
    static func proxy(_ raw: String) throws(ValueError) -> String {
        let s = raw.trimmingWhitespace()
        let schemes = ["http", "https", "socks4", "socks4a", "socks5", "socks5h"]
        guard !s.contains(where: { $0.isWhitespace }), let url = URL(string: s), let scheme = url.scheme?.lowercased(),
              schemes.contains(scheme), let host = url.host, !host.isEmpty,
              url.path.isEmpty || url.path == "/", url.query == nil
        else {
            throw ValueError("invalid proxy \"\(raw)\" (expected \(schemes.joined(separator: "|")):// with a host and an optional port, e.g. http://proxy.example:3128)")
        }
        return s
    }

    /// A proxy URL as logs show it: a password in it is replaced by `<redacted>`.
    static func redactedProxy(_ proxy: String) -> String {
        guard let scheme = proxy.firstRange(of: "://"), let at = proxy[scheme.upperBound...].lastIndex(of: "@") else { return proxy }
        let credentials = proxy[scheme.upperBound..<at]
        guard let colon = credentials.firstIndex(of: ":") else { return proxy }
        return String(proxy[..<colon]) + ":<redacted>" + String(proxy[at...])
    }
}
