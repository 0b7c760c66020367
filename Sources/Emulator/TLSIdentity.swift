import AgentPosix
import Foundation

/// The emulator's certificate chain and private key (PEM), as libmicrohttpd takes them:
/// NUL-terminated C strings that stay alive as long as the server.
public final class TLSIdentity: Sendable {
    public let certificate: CString
    public let key: CString

    /// A C string kept alive by its owner. @unchecked Sendable: written once, read only.
    public final class CString: @unchecked Sendable {
        let pointer: UnsafeMutablePointer<CChar>
        init(_ bytes: [UInt8]) {
            pointer = .allocate(capacity: bytes.count + 1)
            bytes.withUnsafeBytes { UnsafeMutableRawPointer(pointer).copyMemory(from: $0.baseAddress!, byteCount: bytes.count) }
            pointer[bytes.count] = 0
        }
        deinit { pointer.deallocate() }
    }

    public init(certificatePEM: [UInt8], keyPEM: [UInt8]) {
        certificate = CString(certificatePEM)
        key = CString(keyPEM)
    }

    /// The largest certificate chain or key file read.
    static let maxFileBytes = 1 << 20

    /// Reads `--tls-cert FILE` and `--tls-key FILE` as files trusted (`readTrustedFile`: no
    /// symlink, FIFO or device, at most 1 MiB; the key, a secret, neither writable nor readable by
    /// its group or others, as a 0666 admin token is refused); an error names the option and what
    /// is wrong.
    public static func load(certificate: String, key: String) throws(EmulatorServerError) -> TLSIdentity {
        func read(_ path: String, _ option: String, _ marker: String, secret: Bool) throws(EmulatorServerError) -> [UInt8] {
            let data: [UInt8]
            do {
                data = try readTrustedFile(path: path, maxBytes: maxFileBytes, refuseWritableByOthers: secret, refuseReadableByOthers: secret)
            } catch {
                throw EmulatorServerError(description: "\(option): \"\(path)\": \(error.reason)")
            }
            guard String(decoding: data, as: UTF8.self).contains(marker) else {
                throw EmulatorServerError(description: "\(option): \"\(path)\" is not PEM (no \"\(marker)\" line)")
            }
            return data
        }
        return TLSIdentity(certificatePEM: try read(certificate, "--tls-cert", "-----BEGIN CERTIFICATE-----", secret: false),
                           keyPEM: try read(key, "--tls-key", "PRIVATE KEY-----", secret: true))
    }
}
