import Foundation
import LarderTestThreads
import LarderWire
import Testing

@Suite(.ownThreads, .timeLimit(.minutes(20))) struct JSONTests {
    @Test func parsesAndWritesEveryKindOfValue() throws {
        let text = #"{"s":"a\"b\\c\n\u00e9\ud83d\ude00","i":-42,"d":1.5,"e":1e+20,"t":true,"f":false,"n":null,"a":[1,[2]],"o":{"k":"v"}}"#
        let value = try JSONParser.parse(Array(text.utf8))
        #expect(value["s"]?.stringValue == "a\"b\\c\né😀")
        #expect(value["i"] == .int(-42))
        #expect(value["d"] == .double(1.5))
        #expect(value["e"] == .double(1e20))
        #expect(value["n"] == .null)
        #expect(value["a"] == [1, [2]])
        let again = try JSONParser.parse(value.bytes)
        #expect(again == value)
        #expect(value.objectValue?.keys == ["s", "i", "d", "e", "t", "f", "n", "a", "o"])
    }

    @Test func keepsMemberOrderAndChineseText() throws {
        let object: JSON = ["名字": "王小明", "address": "北京市海淀区", "z": 1, "a": 2]
        let text = String(decoding: object.bytes, as: UTF8.self)
        #expect(text == #"{"名字":"王小明","address":"北京市海淀区","z":1,"a":2}"#)
    }

    @Test func escapesControlCharacters() {
        let text = String(decoding: JSON.string("a\u{01}\t\"").bytes, as: UTF8.self)
        #expect(text == #""a\u0001\t\"""#)
    }

    @Test(arguments: [
        ("", "unexpected end"), ("{", "expected a member name"), ("[1,]", "unexpected character"),
        ("{\"a\":1,\"a\":2}", "duplicate member"), ("01", "leading zeros"), ("1e999", "out of range"),
        ("\"\\ud800\"", "unpaired surrogate"), ("\"a\u{01}\"", "control character"), ("nux", "unknown literal"),
        ("{} x", "after the JSON value"), ("\"\\x\"", "invalid escape"), ("-", "invalid number"),
    ])
    func rejectsMalformedInput(input: String, message: String) {
        #expect {
            _ = try JSONParser.parse(Array(input.utf8))
        } throws: { error in
            let error = error as! LarderError
            return error.status == .invalidArgument && error.message.contains(message)
        }
    }

    @Test func rejectsInvalidUTF8() {
        #expect(throws: LarderError.self) { _ = try JSONParser.parse([0x22, 0xFF, 0xFE, 0x22]) }
    }

    @Test func capsNestingDepthWithoutRecursingAway() {
        let deep = Array(repeating: UInt8(ascii: "["), count: 10_000) + Array(repeating: UInt8(ascii: "]"), count: 10_000)
        #expect {
            _ = try JSONParser.parse(deep)
        } throws: { ($0 as! LarderError).message.contains("nesting deeper than 64") }
        let ok = Array(repeating: UInt8(ascii: "["), count: 64) + Array(repeating: UInt8(ascii: "]"), count: 64)
        #expect(throws: Never.self) { _ = try JSONParser.parse(ok) }
    }

    @Test func hugeIntegersBecomeDoublesAndOverflowIsRejected() throws {
        #expect(try JSONParser.parse(Array("9223372036854775807".utf8)) == .int(.max))
        #expect(try JSONParser.parse(Array("9223372036854775808".utf8)) == .double(9223372036854775808))
        #expect(throws: LarderError.self) { _ = try JSONParser.parse(Array(("1" + String(repeating: "0", count: 400)).utf8)) }
    }

    @Test func objectOnlyWhereAnObjectIsRequired() {
        #expect {
            _ = try JSONParser.parseObject(Array("[1]".utf8))
        } throws: { ($0 as! LarderError).message.contains("must be an object, not an array") }
    }

    @Test func timestampsRoundTrip() {
        let ms: Int64 = 1_795_998_388_123
        let text = Timestamp.string(ms)
        #expect(text == "2026-11-30T00:26:28.123Z")
        #expect(Timestamp.parse(text) == ms)
        #expect(Timestamp.string(0) == "1970-01-01T00:00:00.000Z")
        #expect(Timestamp.parse("2000-02-29T12:00:00Z") == 951_825_600_000)
        #expect(Timestamp.parse("2000-13-01T00:00:00Z") == nil)
    }

    @Test func fieldReaderNamesTheFieldAndRejectsUnknownMembers() throws {
        #expect {
            _ = try GetRequest(json: ["collection": "items", "id": "nope"])
        } throws: { ($0 as! LarderError).field == "id" }
        #expect {
            _ = try ListRequest(json: ["collection": "items", "limt": 5])
        } throws: { error in
            let error = error as! LarderError
            return error.field == "limt" && error.message.contains("unknown field")
        }
        #expect {
            _ = try CreateRequest(json: ["collection": 5, "data": [:]])
        } throws: { ($0 as! LarderError).message == "collection must be a string, not a number" }
    }
}
