import AgentCore
import Foundation

/// An in-memory `StateStore` that can fail like a disk: full (ENOSPC), or a crash
/// between writing the temporary file and renaming it. Either way the committed state
/// stays the old one, as the real store guarantees (ST-6).
///
/// It keeps bytes, not values: every save goes through the state's own JSON codec
/// (`PersistentState.json`, the body of the state file) and every load back through
/// `PersistentState(stateBody:)`, so a virtual restart (the 30-day virtual soak's included) runs
/// the codec the real store writes with, and a field the codec forgets is lost here too.
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

    /// What survives a restart: the encoded body of the last save.
    public private(set) var committedBytes: [UInt8]?
    /// The committed state, decoded as a load would.
    public var committed: PersistentState? {
        committedBytes.map { try! Self.decode($0) }  // a codec that cannot read what it wrote is a bug
    }
    public private(set) var saveCount = 0
    /// Applied to every save until cleared.
    public var fault: Fault?
    /// Reported by the next load, as a damaged file set aside would be.
    public var damageOnLoad: String?

    public init(committed: PersistentState? = nil) { committedBytes = committed.map(Self.encode) }

    static func encode(_ state: PersistentState) -> [UInt8] { JSONWriter.encode(state.json) }
    static func decode(_ bytes: [UInt8]) throws -> PersistentState { try PersistentState(stateBody: bytes) }

    public func load() throws -> StoreLoad {
        defer { damageOnLoad = nil }
        if let damage = damageOnLoad { return StoreLoad(state: nil, damage: damage) }
        return StoreLoad(state: try committedBytes.map(Self.decode))
    }

    public func save(_ state: PersistentState) throws {
        if let fault { throw InjectedError(fault: fault) }
        committedBytes = Self.encode(state)
        saveCount += 1
    }
}
