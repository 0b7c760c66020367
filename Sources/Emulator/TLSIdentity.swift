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

    /// Reads `--tls-cert FILE` and `--tls-key FILE`; an error names the option and what is wrong.
    public static func load(certificate: String, key: String) throws(EmulatorServerError) -> TLSIdentity {
        func read(_ path: String, _ option: String, _ marker: String) throws(EmulatorServerError) -> [UInt8] {
            guard let data = FileManager.default.contents(atPath: path) else {
                throw EmulatorServerError(description: "\(option): cannot read \"\(path)\"")
            }
            guard String(decoding: data, as: UTF8.self).contains(marker) else {
                throw EmulatorServerError(description: "\(option): \"\(path)\" is not PEM (no \"\(marker)\" line)")
            }
            return [UInt8](data)
        }
        return TLSIdentity(certificatePEM: try read(certificate, "--tls-cert", "-----BEGIN CERTIFICATE-----"),
                           keyPEM: try read(key, "--tls-key", "PRIVATE KEY-----"))
    }
}
