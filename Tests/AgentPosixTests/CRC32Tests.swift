import AgentCore
import Foundation
import HarnessSupport
import Testing
@testable import AgentPosix

/// The state file's CRC-32 (IEEE 802.3, as zlib's `crc32`): eight bytes a step, the same
/// values as a byte at a time.
@Suite struct CRC32Tests {
    /// The classic table-driven CRC-32, one byte at a time: the reference.
    static func bytewise(_ bytes: some Sequence<UInt8>) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = (crc & 1) != 0 ? 0xEDB8_8320 ^ (crc >> 1) : crc >> 1 }
        }
        return crc ^ 0xFFFF_FFFF
    }

    @Test("Known check values")
    func knownValues() {
        #expect(CRC32.checksum(Array("".utf8)) == 0)
        #expect(CRC32.checksum(Array("a".utf8)) == 0xE8B7_BE43)
        #expect(CRC32.checksum(Array("123456789".utf8)) == 0xCBF4_3926)
        #expect(CRC32.checksum(Array("The quick brown fox jumps over the lazy dog".utf8)) == 0x414F_A339)
        #expect(CRC32.checksum([UInt8](repeating: 0, count: 32)) == 0x190A_55AD)
        #expect(CRC32.checksum([UInt8](repeating: 0xFF, count: 32)) == 0xFF6C_AB0B)
    }

    @Test("Random data of every length up to 100 and larger, at every alignment: the byte-at-a-time values")
    func agreesWithBytewise() {
        var random = SystemRandomNumberGenerator()
        let data = (0..<70_000).map { _ in UInt8.random(in: 0...255, using: &random) }
        for length in Array(0...100) + [255, 256, 257, 4096, 65_537] {
            for start in 0..<8 {
                let slice = data[start..<(start + length)]
                let expected = Self.bytewise(slice)
                #expect(CRC32.checksum(Array(slice)) == expected, "length \(length) at \(start)")
                data.withUnsafeBytes { raw in
                    #expect(CRC32.checksum(UnsafeRawBufferPointer(rebasing: raw[start..<(start + length)])) == expected, "length \(length) at \(start), in place")
                }
            }
        }
    }

    @Test("A body that passes the checksum but is not a state is set aside, saying why")
    func damagedBodyIsReported() throws {
        let dir = TempDir()
        let store = try FileStateStore(directory: dir.path)
        for (body, reason) in [(#"{"hwid":5}"#, "unreadable body: state: hwid is not a string"),
                               (#"{"hwid":"H""#, "unreadable body: unexpected end of input in an object at byte 11"),
                               (#"{"hwid":"H","flags":{"flags":{"k":{}}}}"#, "unreadable body: state: flag k is incomplete")] {
            let bytes = Array(body.utf8)
            let file = Array("pushwoosh-agent-state 1 \(String(CRC32.checksum(bytes), radix: 16)) \(bytes.count)\n".utf8) + bytes
            try Data(file).write(to: URL(fileURLWithPath: store.path))
            #expect(throws: (any Error).self) { try FileStateStore.read(store.path) }
            let loaded = try store.load()
            #expect(loaded.state == nil)
            #expect(loaded.damage?.contains(reason) == true, "\(loaded.damage ?? "no damage")")
        }
        let good = Array(#"{"hwid":"H","userId":"u"}"#.utf8)
        try Data(Array("pushwoosh-agent-state 1 \(String(CRC32.checksum(good), radix: 16)) \(good.count)\n".utf8) + good)
            .write(to: URL(fileURLWithPath: store.path))
        var expected = PersistentState(hwid: "H")
        expected.userId = "u"
        #expect(try store.load() == StoreLoad(state: expected))
    }
}
