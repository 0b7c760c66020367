import Foundation
import Glibc

/// `--lab DIR` made ready (docs/lab.md "The token" and "Whose files"): the directory the lab
/// user's own (else exit 2), its `devices/`, and the lab's lock. Without `--admin-token` a
/// new token of 128 random bits, in hex, is written to `DIR/token` (0600, created `O_EXCL`
/// without following a symbolic link, anew at each start); with one, a stale `DIR/token` is
/// removed, so that a client never reads an old token there.
public struct LabDirectory: Sendable {
    public static let tokenFile = "token"

    public let directory: PrivateDirectory
    /// What `/lab/*` and `/admin/*` require (`Authorization: Bearer TOKEN`).
    public let token: String

    public static func prepare(_ path: String, adminToken: String?, adminTokenFile: String? = nil,
                               log: (String) -> Void = { FileHandle.standardError.write(Data("pushwoosh-emulator: \($0)\n".utf8)) })
        throws(PrivateDirectoryError) -> LabDirectory {
        let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        let directory = try PrivateDirectory(absolute, create: true)
        try directory.makeSubdirectory("devices")
        let token: String
        if let adminToken {
            token = adminToken
            let stale = directory.file(tokenFile)
            if adminTokenFile.flatMap(realpath) != realpath(stale), unlink(stale) == 0 { log("removed the stale \(directory.file(tokenFile)): the lab's token is --admin-token's") }
        } else {
            token = newToken()
            try directory.replace(tokenFile, token + "\n", mode: 0o600)
        }
        if geteuid() == 0 {
            log("the lab runs as root: whoever holds its token runs programs as root (agentd, environment, directory); "
                + "a lab needs no root: run it as an ordinary user (docs/lab.md)")
        }
        return LabDirectory(directory: directory, token: token)
    }

    /// 128 random bits from the system's generator (getrandom), as 32 hex digits.
    static func newToken() -> String {
        var generator = SystemRandomNumberGenerator()
        let digits = Array("0123456789abcdef")
        return String((0..<32).map { _ in digits[Int(generator.next() & 0xf)] })
    }

    private static func realpath(_ path: String) -> String? {
        guard let resolved = Glibc.realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }
}
