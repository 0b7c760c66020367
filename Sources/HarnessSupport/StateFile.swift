import AgentCore
import AgentPosix
import Glibc

/// What a state file on disk holds, read without touching it (tools and tests: unlike
/// `FileStateStore.load`, a damaged file is reported, not moved aside). The format check is
/// `FileStateStore`'s own: header, version, length and CRC-32, then the JSON body.
public enum StateFile: Sendable, Equatable {
    /// No file.
    case missing
    /// A valid file without flags (none fetched yet, or a partial response).
    case noFlags
    case flags(FlagSnapshot)

    public static func read(_ path: String) throws -> StateFile {
        guard let state = try FileStateStore.read(path) else { return .missing }
        return state.flags.map(StateFile.flags) ?? .noFlags
    }
}
