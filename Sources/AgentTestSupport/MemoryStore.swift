import AgentCore
import Foundation

/// An in-memory `StateStore` that can fail like a disk: full (ENOSPC), or a crash
/// between writing the temporary file and renaming it. Either way the committed state
/// stays the old one, as the real store guarantees (ST-6).
public final class MemoryStore: StateStore {
    public enum Fault: Equatable, Sendable {
        case diskFull
        case crashBeforeRename
    }

    public struct InjectedError: Error, CustomStringConvertible {
        public let fault: Fault
        public var description: String {
            switch fault {
            case .diskFull: "write state.json.tmp: No space left on device (ENOSPC)"
            case .crashBeforeRename: "crashed between write and rename"
            }
        }
    }

    /// What survives a restart.
    public private(set) var committed: PersistentState?
    public private(set) var saveCount = 0
    /// Applied to every save until cleared.
    public var fault: Fault?
    /// Reported by the next load, as a damaged file set aside would be.
    public var damageOnLoad: String?

    public init(committed: PersistentState? = nil) { self.committed = committed }

    public func load() throws -> StoreLoad {
        defer { damageOnLoad = nil }
        if let damage = damageOnLoad { return StoreLoad(state: nil, damage: damage) }
        return StoreLoad(state: committed)
    }

    public func save(_ state: PersistentState) throws {
        if let fault { throw InjectedError(fault: fault) }
        committed = state
        saveCount += 1
    }
}
