import LarderTestThreads
import Testing

@testable import LarderWire

/// `TopLevelMember`: `$owner` read from a stored document without its tree answers what the parser answers, and says
/// nil (parse instead) for what it does not take on.
@Suite(.ownThreads, .timeLimit(.minutes(20)))
struct TopLevelMemberTests {
    static func find(_ text: String) -> TopLevelMember.Found? {
        TopLevelMember.find("$owner", in: Array(text.utf8))
    }

    @Test func findsTheMemberPastEveryKindOfValue() {
        let document = #"{"title":"a \"quoted\" {brace} [x]","n":-12.5e3,"ok":true,"none":null,"#
            + #""nested":{"$owner":"not this one","list":[1,{"a":"]"},"}"]},"$owner":"larder|ann"}"#
        #expect(Self.find(document) == .string("larder|ann"))
        #expect(Self.find(#"{ "$owner" : "larder|bo" , "title" : "x" }"#) == .string("larder|bo"))
        #expect(Self.find(#"{"$owner":"ünïcode|ü"}"#) == .string("ünïcode|ü"))
    }

    @Test func absentOrNotAString() {
        #expect(Self.find("{}") == .absent)
        #expect(Self.find(#"{"title":"x","nested":{"$owner":"y"}}"#) == .absent)
        #expect(Self.find(#"{"$owner":null}"#) == .notAString)
        #expect(Self.find(#"{"$owner":{"id":"x"}}"#) == .notAString)
    }

    @Test func whatItDoesNotTakeOnIsNilSoTheCallerParses() {
        #expect(Self.find(#"{"$owner":"an \"escaped\" value"}"#) == nil)
        #expect(Self.find(#"{"\u0024owner":"x"}"#) == nil)
        #expect(Self.find(#"{"title":"unterminated}"#) == nil)
        #expect(Self.find("[1,2]") == nil)
        #expect(Self.find(#"{"a":1"#) == nil)
    }

    /// Over documents made of every kind of value, with `$owner` anywhere or nowhere: the scan agrees with the parser
    /// whenever it answers.
    @Test func agreesWithTheParser() throws {
        var generator = SystemRandomNumberGenerator()
        let values: [JSON] = [
            .string("plain"), .string("with \"quotes\" and \\ and {}[],:"), .int(-7), .double(1.5e10), .bool(false),
            .null, .array([.int(1), .string("]"), .object(["$owner": "inner"])]), .object(["k": .array([])]),
        ]
        for _ in 0..<500 {
            var object: JSONObject = [:]
            for index in 0..<Int.random(in: 0...6, using: &generator) {
                object["m\(index)"] = values.randomElement(using: &generator)!
            }
            if Bool.random(using: &generator) {
                object["$owner"] = Bool.random(using: &generator) ? .string("larder|\(index(&generator))") : .int(3)
            }
            let bytes = JSON.object(object).bytes
            guard let found = TopLevelMember.find("$owner", in: bytes) else { continue }
            let parsed = try JSONParser.parseObject(bytes)["$owner"]
            switch parsed {
            case nil: #expect(found == .absent)
            case .string(let owner)?: #expect(found == .string(owner))
            default: #expect(found == .notAString)
            }
        }
    }

    func index(_ generator: inout SystemRandomNumberGenerator) -> Int { Int.random(in: 0...999, using: &generator) }
}
