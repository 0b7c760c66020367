import AgentCore
import AgentPosix
import EmulatorCore
import Glibc

/// The files `pushwoosh-emulator` reads at start besides its apps and saved lab: a recording
/// to replay, or to turn into apps.
extension EmulatorCommand {
    /// Reads a HAR file for `--replay`; errors name the file and the entry.
    public static func loadRecording(path: String) throws(EmulatorServerError) -> Recording {
        do throws(DefinitionError) {
            return try Recording(har: try readJSON(path, option: "--replay"))
        } catch {
            throw EmulatorServerError(description: "--replay: \(path): \(error.description)")
        }
    }

    /// `--apps-from-har`: the definition reproducing a recording's flags.
    public static func appsFromHAR(path: String) throws(EmulatorServerError) -> JSONValue {
        do throws(DefinitionError) {
            return try AppsFromHAR.definitions(try readJSON(path, option: "--apps-from-har"))
        } catch {
            throw EmulatorServerError(description: "--apps-from-har: \(path): \(error.description)")
        }
    }

    /// A HAR read once into one buffer and parsed; the buffer is gone when this returns, so a
    /// recording costs its parsed values, not its bytes twice over.
    private static func readJSON(_ path: String, option: String) throws(DefinitionError) -> JSONValue {
        try StrictJSONParser.parse(try readInput(path, maxBytes: maxRecordingBytes))
    }

    /// The largest `--apps` or `--state` file, and the largest recording, read.
    static let maxDefinitionBytes = 256 << 20
    static let maxRecordingBytes = 8 << 30

    /// A file given as input (apps, a saved lab, a recording): a regular file of at most
    /// `maxBytes`, read into one buffer of its size; a FIFO or a device (`/dev/zero`) is refused
    /// at once rather than read without end (`readTrustedFile`, whoever may write it).
    static func readInput(_ path: String, maxBytes: Int) throws(DefinitionError) -> [UInt8] {
        do {
            return try readTrustedFile(path: path, maxBytes: maxBytes, refuseWritableByOthers: false)
        } catch {
            if case .system("open", let code) = error.problem {
                throw DefinitionError([], "cannot read the file (\(String(cString: strerror(code))))")
            }
            throw DefinitionError([], error.reason)
        }
    }
}
