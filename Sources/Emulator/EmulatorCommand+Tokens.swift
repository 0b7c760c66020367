import AgentPosix

/// The emulator's token files: `--admin-token FILE` and `--require-token FILE`, read one way.
extension EmulatorCommand {
    /// Reads `--require-token FILE`, the device API's token, as `--admin-token FILE` is read: a
    /// file trusted with a secret (`readTrustedFile`: no symlink, FIFO or device, at most 64 KiB,
    /// not writable by others), its content without trailing whitespace, not empty and without
    /// whitespace. So the token never stands on a command line (`ps`, `/proc/PID/cmdline`), where
    /// every local user could read it.
    public static func loadRequireToken(path: String) throws(EmulatorServerError) -> String {
        try loadToken(path: path, option: "--require-token")
    }

    /// The largest token file read.
    static let maxTokenFileBytes = 64 << 10

    /// Reads a token file (`--admin-token`, `--require-token`) as a file trusted with a secret
    /// (`readTrustedFile`: no symlink, FIFO or device, not writable by others): its content
    /// without trailing whitespace, not empty; errors name `option` and the file.
    static func loadToken(path: String, option: String) throws(EmulatorServerError) -> String {
        let data: [UInt8]
        do {
            data = try readTrustedFile(path: path, maxBytes: maxTokenFileBytes, refuseWritableByOthers: true)
        } catch {
            throw EmulatorServerError(description: "\(option) \(error.description)")
        }
        var text = String(decoding: data, as: UTF8.self)
        while let last = text.last, last.isWhitespace { text.removeLast() }
        guard !text.isEmpty else { throw EmulatorServerError(description: "\(option) \(path): the file is empty") }
        guard !text.contains(where: { $0.isWhitespace || $0.isNewline }) else {
            throw EmulatorServerError(description: "\(option) \(path): the token contains whitespace")
        }
        return text
    }
}
