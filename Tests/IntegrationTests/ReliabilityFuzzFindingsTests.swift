import Foundation
import LarderTestSupport
import LarderTestThreads
import LarderWire
import Testing

/// One test per problem the fuzzer (scripts/fuzz, Fuzz/FuzzWire.swift) found; the inputs are in Fuzz/regressions and
/// `scripts/fuzz --replay` runs them through the fuzz target itself. RELIABILITY.md lists the findings.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ReliabilityFuzzFindingsTests {
    /// Finding 1: Foundation's `UUID(uuidString:)` on Linux reads "+", "0x" and spaces inside a group, so several
    /// texts named one document (`...-0305+82c3301` was `...-0305082c3301`). Ids are now parsed strictly.
    @Test(arguments: [
        "3f2504e0-4f89-41d3-9a0c-0305+82c3301", "3f2504e0-4f89-41d3-9a0c-0305 82c3301",
        "+f2504e0-4f89-41d3-9a0c-0305e82c3301", "0x2504e0-4f89-41d3-9a0c-0305e82c3301",
        "3f2504e0-4f89-41d3-9a0c-0305e82c330g", "3f2504e0+4f89-41d3-9a0c-0305e82c3301",
        "3f2504e0-4f89-41d3-9a0c-0305e82c330\u{0}", "{3f2504e0-4f89-41d3-9a0c-0305e82c33}",
        "3f2504e04f8941d39a0c0305e82c3301", "../../etc/passwd", "",
    ])
    func idsThatAreNotExactlyAUUIDAreRejected(_ text: String) {
        #expect(throws: LarderError.self) { try FieldReader.uuid(text, field: "id") }
    }

    @Test func idsInEitherCaseNameTheSameDocument() throws {
        let lower = try FieldReader.uuid("3f2504e0-4f89-41d3-9a0c-0305e82c3301", field: "id")
        let upper = try FieldReader.uuid("3F2504E0-4F89-41D3-9A0C-0305E82C3301", field: "id")
        #expect(lower == upper)
        #expect(lower.wireString == "3f2504e0-4f89-41d3-9a0c-0305e82c3301")
        for _ in 0..<100 {
            let id = UUID()
            #expect(try FieldReader.uuid(id.uuidString, field: "id") == id)
            #expect(try FieldReader.uuid(id.wireString, field: "id") == id)
        }
    }

    /// The table-driven parser agrees with the rule written out plainly, over valid ids with one byte changed to
    /// every value at every position.
    @Test func theParserAgreesWithTheRuleAtEveryPositionAndByte() {
        func reference(_ bytes: [UInt8]) -> UUID? {
            guard bytes.count == 36 else { return nil }
            for (i, b) in bytes.enumerated() {
                if [8, 13, 18, 23].contains(i) {
                    if b != UInt8(ascii: "-") { return nil }
                } else if !(b >= 0x30 && b <= 0x39) && !(b >= 0x61 && b <= 0x66) && !(b >= 0x41 && b <= 0x46) {
                    return nil
                }
            }
            return UUID(uuidString: String(decoding: bytes, as: UTF8.self))
        }
        var mismatches = 0
        for _ in 0..<3 {
            let valid = Array(UUID().uuidString.utf8)
            for position in 0..<36 {
                for value in 0...255 {
                    var bytes = valid
                    bytes[position] = UInt8(value)
                    let parsed = try? FieldReader.uuid(String(decoding: bytes, as: UTF8.self), field: "id")
                    if parsed != reference(bytes) { mismatches += 1 }
                }
            }
        }
        #expect(mismatches == 0)
    }
}

/// Finding 2: `Timestamp.parse` took February 30th and second 60, so `9999-12-31T23:59:60.999Z` became an instant in
/// year 10000 that is written back as `9999-01-01T00:00:00.999Z`. Only instants that exist are read now.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ReliabilityTimestampFindingTests {
    @Test(arguments: [
        "9999-12-31T23:59:60.999Z", "2026-02-29T00:00:00Z", "2026-04-31T00:00:00.000Z", "1900-02-29T12:00:00Z",
        "2026-11-30T24:00:00Z", "2026-11-30T00:60:00Z", "2026-11-00T00:00:00Z", "2026-13-01T00:00:00Z",
    ])
    func datesThatDoNotExistAreNotRead(_ text: String) {
        #expect(Timestamp.parse(text) == nil)
    }

    @Test func everyReadInstantIsWrittenBackAsItself() throws {
        #expect(Timestamp.parse("2024-02-29T23:59:59.999Z") != nil)
        #expect(Timestamp.parse("2000-02-29T00:00:00Z") != nil)
        let last = try #require(Timestamp.parse("9999-12-31T23:59:59.999Z"))
        #expect(Timestamp.string(last) == "9999-12-31T23:59:59.999Z")
        let first = try #require(Timestamp.parse("0000-01-01T00:00:00.000Z"))
        #expect(Timestamp.string(first) == "0000-01-01T00:00:00.000Z")
        for _ in 0..<1000 {
            let ms = Int64.random(in: first...last)
            #expect(Timestamp.parse(Timestamp.string(ms)) == ms)
        }
    }
}

/// Finding 6: the tree-free REPLACE reader (`DocumentWrite.fast`) added up a `rev` of 20 digits in an `Int64` before
/// checking its length: the overflow trapped, and one request took the whole server down. Through a real server, every
/// oversized `rev` is now INVALID_ARGUMENT from the general path, and the server answers the next request.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ReliabilityRevisionFindingTests {
    @Test func aRevisionOfTwentyDigitsIsRefusedAndTheServerServesOn() throws {
        try withServerWithoutListener { server in
            let c = try RawClient.connected(to: server)
            try c.hello()
            let created = try c.call(.create, ["collection": "todos", "data": ["title": "milk"]])
            let id = try #require(created.replyJSON.objectValue?["id"]?.stringValue)
            for rev in ["90022222222222220993", "99999999999999999999999999999", "9223372036854775808"] {
                let text = #"{"collection":"todos","id":"\#(id)","data":{},"rev":\#(rev)}"#
                let reply = try DocumentWritePathTests.call(c, .replace, text)
                #expect(reply.status == .invalidArgument, "\(rev): \(reply.replyText)")
            }
            #expect(try c.call(.ping).status == .ok)
            let read = try c.call(.get, ["collection": "todos", "id": .string(id)])
            #expect(read.replyJSON.objectValue?["rev"] == .int(1))
        }
    }
}
