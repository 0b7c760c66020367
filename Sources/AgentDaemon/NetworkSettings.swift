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

    /// The file, read with AgentPosix's `TrustedFile` (docs/shared-host.md L.4): never through a
    /// symlink, a FIFO or a device, at most `maximumBytes`, and refused when others may write to
    /// it, or to its directory, /tmp included (anyone could add a CA, or put their file there).
    private static func readFile(_ path: String) throws(ValueError) -> [UInt8] {
        do {
            return try TrustedFile.read(path: path, maxBytes: maximumBytes, refuseWritableByOthers: true, refuseOpenDirectory: true).bytes
        } catch {
            if case .system = error.problem { throw ValueError("cannot read \"\(path)\": \(error.reason)") }
            throw ValueError("\"\(path)\": \(error.reason)")
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
            throw ValueError("invalid proxy \"\(redactedProxy(raw))\" (expected \(schemes.joined(separator: "|")):// with a host and an optional port, e.g. http://proxy.example:3128)")
        }
        return s
    }

    /// A proxy URL as logs and errors show it: a password in it (`user:PASSWORD@`, with or
    /// without a scheme) is replaced by `<redacted>`.
    static func redactedProxy(_ proxy: String) -> String {
        let authority = proxy.firstRange(of: "://")?.upperBound ?? proxy.startIndex
        guard let at = proxy[authority...].lastIndex(of: "@"), let colon = proxy[authority..<at].firstIndex(of: ":") else { return proxy }
        return String(proxy[...colon]) + "<redacted>" + String(proxy[at...])
    }
}
